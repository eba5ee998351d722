"""Shared fixtures: a real redis-server (started here on a free port unless
DISPATCH_TEST_REDIS_URL names one) and an anyio backend on uvloop."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis


@pytest.fixture(scope="session")
def anyio_backend() -> tuple[str, dict[str, bool]]:
    return ("asyncio", {"use_uvloop": True})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis_server(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
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
            "127.0.0.1",
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


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    given = os.environ.get("DISPATCH_TEST_REDIS_URL")
    if given:
        yield given
        return
    with tempfile.TemporaryDirectory() as workdir:
        proc, url = start_redis_server(workdir)
        try:
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own, so tests never see each other's keys."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()
