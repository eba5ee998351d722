"""The job network and its egress proxy, through a real daemon, engine and Redis.

Each test has a network of its own (removed after, with the firewall rules a daemon left), two
HTTP servers on this machine's loopback (a job can reach them only through the proxy), and
reads what the job printed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dispatch.egress import firewall
from dispatch.egress.network import host_addresses
from dispatch.runners.docker import DockerClient
from tests.support.daemons import (
    daemon,
    daemon_log,
    dispatch,
    dispatch_json,
    docker_env,
    wait_state,
)
from tests.support.docker import remove_network
from tests.support.polling import eventually_sync
from tests.support.redis_server import free_port, start_redis_server

# the job's own view: the gateway from its route, credentials from HTTP_PROXY
GATEWAY = "gw=$(ip route | awk '/default/ {print $3}')"


class _Named(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {getattr(self.server, 'server_port', 0)}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[tuple[int, int]]:
    """Two HTTP servers on 127.0.0.1: a container cannot reach loopback but by the proxy."""
    started = [ThreadingHTTPServer(("127.0.0.1", 0), _Named) for _ in range(2)]
    for server in started:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield started[0].server_address[1], started[1].server_address[1]
    for server in started:
        server.shutdown()
        server.server_close()


@pytest.fixture
def network(docker_host: str) -> Iterator[str]:
    name = f"dispatch-t{uuid.uuid4().hex[:10]}"
    yield name
    asyncio.run(remove_network(docker_host, name))


@pytest.fixture
def env(
    redis_url: str, prefix: str, tmp_path: Path, image: str, host_label: str, network: str
) -> dict[str, str]:
    return docker_env(
        redis_url, prefix, tmp_path / "state", host_label, image, DISPATCH_JOB_NETWORK=network
    )


def allow(env: dict[str, str], *hosts: str) -> None:
    config = Path(env["DISPATCH_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    (config / "egress.json").write_text(json.dumps({"version": 1, "hosts": list(hosts)}))


def run_job(env: dict[str, str], script: str, *flags: str) -> str:
    """The output of a job that ran `script` to completion."""
    job_id = dispatch(env, "submit", *flags, "--", "sh", "-c", script).stdout.strip()
    assert wait_state(env, job_id, "completed", "failed", timeout=60) == "completed"
    (record,) = [r for r in dispatch_json(env, "runs") if r["id"] == job_id]
    return Path(record["output"]).read_text()


def fetch(port: int, path: str = "/") -> str:
    """wget through HTTP_PROXY; prints the body or the proxy's status line."""
    return f"wget -q -O - http://127.0.0.1:{port}{path} 2>&1 || echo refused-{port}; "


def test_a_job_reaches_the_allowed_host_only_through_the_proxy(
    env: dict[str, str], servers: tuple[int, int]
) -> None:
    allowed, other = servers
    allow(env, f"127.0.0.1:{allowed}")
    with daemon(env):
        out = run_job(env, fetch(allowed) + fetch(other, "/private/path?token=abc"))
    assert f"hello from {allowed}" in out
    assert f"refused-{other}" in out and f"hello from {other}" not in out
    assert "403" in out
    log = daemon_log(env)
    refused = [json.loads(line) for line in log.splitlines() if '"egress_refused"' in line]
    assert [(r["host"], r["port"]) for r in refused] == [("127.0.0.1", other)]
    assert "private" not in log and "token=abc" not in log  # never a path


def test_connect_tunnels_to_an_allowed_host_and_is_refused_for_another(
    env: dict[str, str], servers: tuple[int, int]
) -> None:
    allowed, other = servers
    allow(env, f"127.0.0.1:{allowed}")
    tunnel = (
        (
            "cred=${HTTP_PROXY#http://}; addr=${cred##*@}; "
            'cred=$(printf %s "${cred%@*}" | base64); '
            "for p in ALLOWED OTHER; do "
            "(printf 'CONNECT 127.0.0.1:%s HTTP/1.1\\r\\nHost: x\\r\\nProxy-Authorization: Basic %s"
            "\\r\\n\\r\\nGET / HTTP/1.0\\r\\n\\r\\n' $p $cred; sleep 2) "
            "| nc ${addr%:*} ${addr##*:}; done"
        )
        .replace("ALLOWED", str(allowed))
        .replace("OTHER", str(other))
    )
    with daemon(env):
        out = run_job(env, tunnel)
    assert "200 Connection established" in out and f"hello from {allowed}" in out
    assert "403 Forbidden" in out and f"hello from {other}" not in out


def test_the_host_is_closed_to_a_job_even_redis_on_every_address(
    env: dict[str, str], servers: tuple[int, int]
) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        proc, url = start_redis_server(workdir, bind="0.0.0.0")
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        try:
            with daemon(env):
                # the gateway, the LAN address, docker0...: each is the host, each must be shut
                addresses = " ".join(host_addresses())
                probe = f"{GATEWAY}; for a in $gw {addresses}; do "
                probe += f"nc -w 3 $a {port} </dev/null && echo open-$a || echo closed-$a; done"
                out = run_job(env, probe)
                gateway = out.split("closed-", 1)[1].split()[0] if "closed-" in out else "?"
                with socket.create_connection((gateway, port), timeout=3):
                    pass  # the host itself reaches it there: it does listen on that address
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    assert "open-" not in out
    assert {f"closed-{a}" for a in [gateway, *addresses.split()]} <= set(out.split())


def test_a_job_narrowed_by_egress_cannot_reach_the_other_allowed_hosts(
    env: dict[str, str], servers: tuple[int, int]
) -> None:
    first, second = servers
    allow(env, f"127.0.0.1:{first}", f"127.0.0.1:{second}")
    with daemon(env):
        both = run_job(env, fetch(first) + fetch(second))
        narrowed = run_job(env, fetch(first) + fetch(second), "--egress", f"127.0.0.1:{first}")
        wider = dispatch(env, "submit", "--egress", "*.", "--", "true")
    assert f"hello from {first}" in both and f"hello from {second}" in both
    assert f"hello from {first}" in narrowed and f"refused-{second}" in narrowed
    assert wider.returncode == 2 and "egress" in wider.stderr


def test_with_the_proxy_down_a_job_waits_and_runs_once_it_is_back(
    env: dict[str, str], docker_host: str, network: str
) -> None:
    gateway = asyncio.run(_made(docker_host, network))
    port = free_port()
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind((gateway, port))  # the proxy's address taken: it cannot listen
    squatter.listen()
    env = {**env, "DISPATCH_EGRESS_PORT": str(port)}
    with daemon(env):
        job_id = dispatch(env, "submit", "--attempts", "1", "--", "echo", "hi").stdout.strip()
        view = eventually_sync(lambda: _held(env, job_id), 30)
        assert view["reason"] == "egress-unavailable" and view["attempt"] == 1
        assert dispatch_json(env, "runs") == []
        squatter.close()
        assert wait_state(env, job_id, "completed", "failed", timeout=60) == "completed"
    (record,) = dispatch_json(env, "runs")
    assert (record["attempt"], record["outcome"]) == (1, "completed")


async def _made(docker_host: str, name: str) -> str:
    async with DockerClient(docker_host) as client:
        await client.network_create(name, {"test": "1"})
        info = await client.network_inspect(name)
    return str(info["IPAM"]["Config"][0]["Gateway"])


def _held(env: dict[str, str], job_id: str) -> Any:
    view = dispatch_json(env, "why", job_id)
    return view if view["state"] == "delayed" and view.get("reason") else None


def test_doctor_reports_the_network_the_proxy_the_rules_and_redis_out_of_reach(
    env: dict[str, str], network: str, host_label: str
) -> None:
    allow(env, "example.com", "*.example.org")
    with tempfile.TemporaryDirectory() as workdir:
        proc, url = start_redis_server(workdir, bind="0.0.0.0")
        try:
            env = {**env, "DISPATCH_REDIS_URL": url}
            with daemon(env):
                eventually_sync(lambda: '"egress_ready"' in daemon_log(env), 30)
                done = dispatch(env, "doctor")
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    lines = {line.split()[1]: line for line in done.stdout.splitlines()}
    assert done.returncode == 0, done.stdout
    for name in ("job-network", "egress-proxy", "firewall", "redis-isolation"):
        assert lines[name].startswith("ok "), done.stdout
    assert "2 allowed hosts" in lines["egress-proxy"]
    assert f"{network} internal" in lines["job-network"]
    assert asyncio.run(_rules_of(network, host_label)) == []  # a stopped daemon removes its own


async def _rules_of(network: str, host: str) -> list[list[str]]:
    rules = await firewall.listed("iptables")
    return [r for r in rules if firewall.tag(network, host) in r]
