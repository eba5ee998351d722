"""The egress proxy on loopback, with a real upstream: who gets through, and its bounds."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator

import pytest

from dispatch.egress.proxy import EgressProxy, Grant
from dispatch.egress.relay import Limits
from dispatch.egress.rules import parse_rule

pytestmark = pytest.mark.anyio


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers with the request head it got; a tunnel closed before one came is fine."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        writer.close()
        return
    body = head.replace(b"\r\n", b"|")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    writer.close()


@pytest.fixture
async def upstream() -> AsyncIterator[int]:
    server = await asyncio.start_server(_upstream, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    server.close()


def grant(job: str, *hosts: str, narrow: tuple[str, ...] = ()) -> Grant:
    rules = tuple(parse_rule(h) for h in hosts)
    return Grant(job, f"tok-{job}", lambda: rules, tuple(parse_rule(h) for h in narrow))


async def proxy_with(*grants: Grant, limits: Limits | None = None) -> tuple[EgressProxy, int]:
    proxy = EgressProxy({g.job: g for g in grants}, limits)
    return proxy, await proxy.start("127.0.0.1", 0)


async def ask(port: int, head: str, job: str = "j1", token: str | None = None) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if job:
        cred = base64.b64encode(f"{job}:{token or 'tok-' + job}".encode()).decode()
        head = head.replace("\r\n\r\n", f"\r\nProxy-Authorization: Basic {cred}\r\n\r\n", 1)
    writer.write(head.encode())
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return answer


def get(port: int, path: str = "/x") -> str:
    return f"GET http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n"


async def test_a_granted_job_reaches_an_allowed_host_as_the_uri_names_it(upstream: int) -> None:
    proxy, port = await proxy_with(grant("j1", f"127.0.0.1:{upstream}"))
    answer = await ask(port, get(upstream))
    await proxy.close()
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"GET /x HTTP/1.1" in answer and f"host: 127.0.0.1:{upstream}".encode() in answer
    assert b"proxy-authorization" not in answer.lower()
    assert b"elsewhere.example" not in answer  # the Host header is the checked one


@pytest.mark.parametrize(("job", "token"), [("", None), ("j1", "wrong"), ("nobody", None)])
async def test_without_the_job_s_credentials_the_answer_is_407(
    upstream: int, job: str, token: str | None
) -> None:
    proxy, port = await proxy_with(grant("j1", f"127.0.0.1:{upstream}"))
    proxy.summary = "3 allowed hosts"
    answer = await ask(port, get(upstream), job, token)
    await proxy.close()
    assert answer.startswith(b"HTTP/1.1 407") and b"3 allowed hosts" in answer
    assert b"Proxy-Authenticate: Basic" in answer


async def test_a_host_off_the_list_or_outside_the_job_s_narrowing_is_403(upstream: int) -> None:
    allowed = f"127.0.0.1:{upstream}"
    proxy, port = await proxy_with(
        grant("j1", "example.com"), grant("j2", allowed, "localhost:1", narrow=("localhost:1",))
    )
    off_list = await ask(port, get(upstream), "j1")
    narrowed = await ask(port, get(upstream), "j2")
    await proxy.close()
    assert off_list.startswith(b"HTTP/1.1 403") and narrowed.startswith(b"HTTP/1.1 403")


async def test_connect_opens_a_tunnel_and_an_idle_one_is_closed(upstream: int) -> None:
    limits = Limits(idle_timeout_s=0.3)
    proxy, port = await proxy_with(grant("j1", f"127.0.0.1:{upstream}"), limits=limits)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    cred = base64.b64encode(b"j1:tok-j1").decode()
    writer.write(
        f"CONNECT 127.0.0.1:{upstream} HTTP/1.1\r\nHost: x\r\n"
        f"Proxy-Authorization: Basic {cred}\r\n\r\n".encode()
    )
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    assert await asyncio.wait_for(reader.read(), 5) == b""  # nothing sent: closed when idle
    writer.close()
    await proxy.close()


async def test_a_job_has_at_most_its_share_of_connections(upstream: int) -> None:
    proxy, port = await proxy_with(
        grant("j1", f"127.0.0.1:{upstream}"), limits=Limits(max_per_job=1)
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    cred = base64.b64encode(b"j1:tok-j1").decode()
    writer.write(f"CONNECT 127.0.0.1:{upstream} HTTP/1.1\r\nHost: x\r\n".encode())
    writer.write(f"Proxy-Authorization: Basic {cred}\r\n\r\n".encode())
    await reader.readuntil(b"\r\n\r\n")  # the tunnel is open
    second = await ask(port, get(upstream))
    writer.close()
    await proxy.close()
    assert second.startswith(b"HTTP/1.1 429")


async def test_a_head_over_the_bound_or_not_a_proxy_request_is_400(upstream: int) -> None:
    proxy, port = await proxy_with(
        grant("j1", f"127.0.0.1:{upstream}"), limits=Limits(max_head=512)
    )
    huge = await ask(port, f"GET http://a/ HTTP/1.1\r\nHost: a\r\nX: {'y' * 2000}\r\n\r\n")
    origin = await ask(port, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
    no_port = await ask(port, "CONNECT 127.0.0.1 HTTP/1.1\r\nHost: a\r\n\r\n")
    await proxy.close()
    assert huge.startswith(b"HTTP/1.1 431")
    assert origin.startswith(b"HTTP/1.1 400") and no_port.startswith(b"HTTP/1.1 400")


async def test_an_unreachable_allowed_host_is_502() -> None:
    proxy, port = await proxy_with(grant("j1", "127.0.0.1:9"))
    answer = await ask(port, "GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: a\r\n\r\n")
    await proxy.close()
    assert answer.startswith(b"HTTP/1.1 502")
