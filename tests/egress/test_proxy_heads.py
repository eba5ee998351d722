"""One job's unfinished request heads cannot starve another job's egress (issue 26, item 3):
the real proxy on loopback, one source address (127.0.0.2, as one job's container) opening
2,000 connections that each send a byte and stop, another (127.0.0.3) asking for a tunnel."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import resource
import time
from collections.abc import AsyncIterator

import pytest

from dispatch.egress.proxy import EgressProxy, Grant
from dispatch.egress.relay import Limits
from dispatch.egress.rules import parse_rule
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio

SLOW_HEADS = 2000


def room_for(sockets: int) -> int:
    """As many of `sockets` as this process may open (each costs two descriptors here)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * sockets + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    return min(sockets, (resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 256) // 2)


@pytest.fixture
async def upstream() -> AsyncIterator[int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(100))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    server.close()


def grant(job: str, rule: str) -> Grant:
    rules = (parse_rule(rule),)
    return Grant(job, f"tok-{job}", lambda: rules)


async def connect_through(proxy_port: int, target: int, source: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port, local_addr=(source, 0))
    cred = base64.b64encode(b"j2:tok-j2").decode()
    writer.write(
        f"CONNECT 127.0.0.1:{target} HTTP/1.1\r\nHost: x\r\n"
        f"Proxy-Authorization: Basic {cred}\r\n\r\n".encode()
    )
    answer = await reader.readuntil(b"\r\n\r\n")
    writer.write(b"ping")
    answer += await reader.read(4)
    writer.close()
    return answer


async def test_a_jobs_slow_heads_leave_another_jobs_connect_answered(upstream: int) -> None:
    limits = Limits()
    rule = f"127.0.0.1:{upstream}"
    proxy = EgressProxy({"j1": grant("j1", rule), "j2": grant("j2", rule)}, limits)
    port = await proxy.start("127.0.0.1", 0)
    count = room_for(SLOW_HEADS)
    flood: list[asyncio.StreamWriter] = []
    try:
        for _ in range(count):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=("127.0.0.2", 0)
                )
                writer.write(b"C")  # one byte of a request line, and no more
                flood.append(writer)
        assert len(flood) > 1024, "the flood is larger than the proxy's old global bound"
        held = proxy.heads.get("127.0.0.2", 0)
        assert 0 < held <= limits.max_heads_per_source  # the rest were answered and closed
        assert proxy.heads.total() <= limits.max_heads  # what the proxy holds is bounded

        started = time.monotonic()
        answer = await asyncio.wait_for(connect_through(port, upstream, "127.0.0.3"), 1.0)
        assert time.monotonic() - started < 1.0
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ping")

        # the flood's held heads go after the request line's time, not the whole head's
        async def drained() -> bool:
            return proxy.heads.get("127.0.0.2", 0) == 0

        await eventually(drained, timeout=limits.first_line_s + 3)
    finally:
        for writer in flood:
            writer.close()
        await proxy.close()
