"""The queue server of deploy/redis/: the compose file parsed and checked (no compose is
installed here), and its Redis run for real from the same config and the same entrypoint
script, with only the container's paths moved into a temporary dir: AOF on, noeviction, the
password from a file and never on a command line, and the health check healthy only while the
password is accepted. The Podman quadlet is checked against the compose file."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from redis import Redis
from redis.exceptions import AuthenticationError, RedisError, ResponseError

from tests.support.polling import eventually_sync
from tests.support.redis_server import free_port

HERE = Path(__file__).resolve().parents[2] / "deploy" / "redis"
COMPOSE = yaml.safe_load((HERE / "compose.yml").read_text())
REDIS = COMPOSE["services"]["redis"]
SECRET = "/run/secrets/redis_password"
PASSWORD = "c0rrect-h0rse-battery"


def test_the_compose_file_says_what_a_fleet_needs() -> None:
    assert REDIS["image"].startswith("docker.io/library/redis:7")
    assert REDIS["ports"] == ["127.0.0.1:6379:6379"]  # loopback unless you choose otherwise
    assert REDIS["secrets"] == ["redis_password"]
    assert COMPOSE["secrets"]["redis_password"]["file"] == "./redis-password"
    assert "redis-data:/data" in REDIS["volumes"] and "redis-data" in COMPOSE["volumes"]
    script = REDIS["entrypoint"][2]
    assert SECRET in script and "requirepass" in script and PASSWORD not in script
    health = REDIS["healthcheck"]["test"]
    assert health[0] == "CMD-SHELL" and SECRET in health[1] and "redis-cli ping" in health[1]
    assert "deploy/redis/redis-password" in (HERE.parents[1] / ".gitignore").read_text()


def test_the_quadlet_runs_the_same_server() -> None:
    lines = [ln for ln in (HERE / "dispatch-redis.container").read_text().splitlines()]
    found: dict[str, list[str]] = {}
    for line in lines:
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    assert found["Image"] == [REDIS["image"]]
    assert found["PublishPort"] == ["127.0.0.1:6379:6379"]
    assert found["Secret"] == [f"dispatch-redis-password,target={SECRET}"]
    assert any(v.endswith(":/data") for v in found["Volume"])
    assert "--include /tmp/auth.conf" in found["Exec"][0]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes], Path]]:
    """The compose entrypoint, its container paths moved under tmp; the port overridden."""
    secret = tmp_path / "redis_password"
    secret.write_text(PASSWORD + "\n")
    conf = tmp_path / "redis.conf"
    shutil.copy(HERE / "redis.conf", conf)
    port = free_port()
    script = (
        REDIS["entrypoint"][2]
        .replace("$$", "$")
        .replace(SECRET, str(secret))
        .replace("/tmp/auth.conf", str(tmp_path / "auth.conf"))
        .replace("/usr/local/etc/redis/redis.conf", str(conf))
    ) + f" --port {port} --dir {tmp_path} --bind 127.0.0.1 --save ''"
    proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.DEVNULL)
    try:
        eventually_sync(lambda: _answers(port), 20)
        yield port, proc, secret
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _answers(port: int) -> bool:
    try:
        with Redis(port=port, password=PASSWORD) as r:
            return bool(r.ping())
    except (OSError, RedisError):  # not listening yet, or still loading its files
        return False


def test_the_server_persists_refuses_eviction_and_keeps_its_password_off_argv(
    server: tuple[int, subprocess.Popen[bytes], Path],
) -> None:
    port, proc, _ = server
    with pytest.raises((AuthenticationError, ResponseError)):
        Redis(port=port).set("k", "v")  # no password, no service
    r = Redis(port=port, password=PASSWORD)
    assert r.config_get("appendonly") == {"appendonly": "yes"}
    assert r.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes()  # sh exec'd redis-server in place
    assert b"redis-server" in argv and PASSWORD.encode() not in argv
    r.close()


def test_the_health_check_passes_only_while_the_password_is_accepted(
    server: tuple[int, subprocess.Popen[bytes], Path],
) -> None:
    port, _, secret = server
    check = REDIS["healthcheck"]["test"][1].replace("$$", "$").replace(SECRET, str(secret))
    check = check.replace("redis-cli ping", f"redis-cli -p {port} ping")
    assert subprocess.run(["sh", "-c", check], timeout=10).returncode == 0
    secret.write_text("not-the-password\n")
    assert subprocess.run(["sh", "-c", check], timeout=10, capture_output=True).returncode != 0
