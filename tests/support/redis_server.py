"""A throwaway redis-server on a free loopback port, for the session fixture and the tests
that need a port nothing listens on."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
import redis.cluster

from dispatch.config.redis_target import redis_target


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis_server(
    workdir: str, bind: str = "127.0.0.1"
) -> tuple[subprocess.Popen[bytes], str]:
    """`bind` "0.0.0.0": on every address, as a careless operator's Redis would be."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed; run the README's test command")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            bind,
            *(["--protected-mode", "no"] if bind != "127.0.0.1" else []),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.02)
    proc.kill()
    pytest.fail("redis-server did not start within 10 s")


@contextmanager
def own_redis_server(bind: str = "127.0.0.1") -> Iterator[str]:
    """A server of the caller's own, its URL; stopped at the end."""
    with tempfile.TemporaryDirectory() as workdir:
        proc, url = start_redis_server(workdir, bind)
        try:
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def sync_client(url: str) -> redis.Redis | redis.RedisCluster:
    """redis-py's blocking client of DISPATCH_REDIS_URL's forms: a cluster's for a seed list or
    a +cluster scheme (config/redis_target.py), else one server's."""
    target = redis_target(url)
    if not target.cluster:
        return redis.Redis.from_url(target.urls[0])
    first, *rest = target.urls
    nodes = [
        redis.cluster.ClusterNode(*u.split("://", 1)[1].split("/")[0].split(":")) for u in rest
    ]
    return redis.RedisCluster.from_url(first, startup_nodes=nodes)
