"""A redis-server of the bench's own, and what the benches read from one.

`redis_server()` starts one on a free loopback port (no persistence) for the length of a
`with`, unless DISPATCH_REDIS_URL names one; `children.start_redis` starts the same server as a
child the bench kills on its way out. The rest reads a server: its version, its clock, and the
calls per command from INFO commandstats (a command a script runs counts like one a client
sends).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from redis.asyncio import Redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_argv(port: int, folder: str) -> list[str]:
    """redis-server on loopback at `port`, no RDB or AOF, its working dir `folder`."""
    binary = shutil.which("redis-server") or sys.exit("redis-server not found")
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", folder]
    return [*argv, "--appendonly", "no"]


@contextmanager
def redis_server() -> Iterator[str]:
    """The URL of DISPATCH_REDIS_URL, or of a redis-server started here until the exit."""
    given = os.environ.get("DISPATCH_REDIS_URL")
    if given:
        yield given
        return
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(server_argv(port, tmp), stdout=subprocess.DEVNULL)
        try:
            wait_for_port(port)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@contextmanager
def redis_cluster(primaries: int = 3) -> Iterator[list[str]]:
    """A cluster of `primaries` redis-servers on loopback (no persistence, no replicas), joined
    by `redis-cli --cluster create`: its nodes' URLs until the exit."""
    cli = shutil.which("redis-cli") or sys.exit("redis-cli not found")
    ports: list[int] = []
    while len(ports) < primaries:
        if (port := cluster_port()) not in ports:
            ports.append(port)
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for port in ports:
            os.makedirs(f"{tmp}/{port}")
            argv = [*server_argv(port, f"{tmp}/{port}"), "--cluster-enabled", "yes"]
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL))
        try:
            for port in ports:
                wait_for_port(port)
            nodes = [f"127.0.0.1:{p}" for p in ports]
            subprocess.run(
                [cli, "--cluster", "create", *nodes, "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            _wait_cluster_ok(cli, ports)
            yield [f"redis://{n}/0" for n in nodes]
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=10)


def cluster_port() -> int:
    """A free port whose cluster bus port (10000 above it) is free too and exists."""
    while True:
        port = free_port() % 50_000 + 1_024
        if _free(port) and _free(port + 10_000):
            return port


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait_cluster_ok(cli: str, ports: list[int]) -> None:
    deadline = time.monotonic() + 30
    for port in ports:
        while (
            b"cluster_state:ok"
            not in subprocess.run(
                [cli, "-p", str(port), "cluster", "info"], capture_output=True, check=False
            ).stdout
        ):
            if time.monotonic() > deadline:
                sys.exit("the bench's cluster did not come up")
            time.sleep(0.1)


def wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    sys.exit("redis-server did not start")


async def redis_version(url: str) -> str:
    client = Redis.from_url(url)
    info = await client.info("server")
    await client.aclose()
    return str(info.get("valkey_version") or info["redis_version"])


async def server_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def command_calls(redis: Redis) -> dict[str, int]:
    """Calls per command since the server started, INFO itself left out."""
    commands = await redis.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(v["calls"])
        for name, v in commands.items()
        if name != "cmdstat_info"
    }


@dataclass(frozen=True, slots=True)
class Stats:
    calls: dict[str, int]
    cpu_s: float

    def __sub__(self, other: Stats) -> Stats:
        names = self.calls.keys() | other.calls.keys()
        calls = {n: self.calls.get(n, 0) - other.calls.get(n, 0) for n in names}
        return Stats({n: c for n, c in calls.items() if c}, self.cpu_s - other.cpu_s)

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    @property
    def scripts(self) -> int:
        return self.calls.get("evalsha", 0) + self.calls.get("eval", 0)


async def stats(redis: Redis) -> Stats:
    """Calls per command since the server started (INFO itself left out), and its CPU."""
    calls = await command_calls(redis)
    cpu = await redis.info("cpu")
    return Stats(calls, float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]))
