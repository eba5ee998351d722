"""Moving bytes once the proxy has said yes: a CONNECT tunnel, or one plain HTTP request.

Both end when both directions are done or nothing moved either way for `idle_timeout_s`.
A plain request is re-framed by h11 (so its body ends where HTTP says, and nothing after it is
forwarded), and goes out with the Host header of the checked URI and `Connection: close`.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import h11

_HOP = {b"connection", b"proxy-authorization", b"proxy-connection", b"keep-alive", b"te"}
_HOP |= {b"trailer", b"upgrade", b"host"}


@dataclass(frozen=True)
class Limits:
    max_per_job: int = 64  # granted connections of one job
    max_total: int = 1024  # granted connections of all jobs
    max_heads: int = 256  # connections whose request head is not in yet, of all sources
    max_heads_per_source: int = 16  # of those, from one address (a job's container has one)
    max_head: int = 16 * 1024
    first_line_s: float = 2.0  # a connection that has not sent its request line by then goes
    head_timeout_s: float = 10.0
    connect_timeout_s: float = 15.0
    idle_timeout_s: float = 300.0


async def tunnel(
    conn: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    idle_s: float,
) -> None:
    established = h11.Response(status_code=200, headers=[], reason=b"Connection established")
    writer.write(conn.send(established) or b"")
    up_reader, up_writer = upstream
    if conn.trailing_data[0]:
        up_writer.write(conn.trailing_data[0])
    await _relay(reader, writer, up_reader, up_writer, idle_s)


async def forward(
    conn: h11.Connection,
    request: h11.Request,
    target: bytes,
    job: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    limits: Limits,
) -> None:
    """One request out (re-framed by h11), the answer back as it comes until upstream closes."""
    reader, writer = job
    up_reader, up_writer = upstream
    out = h11.Connection(h11.CLIENT)
    headers = [(k, v) for k, v in request.headers if k not in _HOP]
    headers += [(b"host", _authority(request)), (b"connection", b"close")]
    up_writer.write(out.send(h11.Request(method=request.method, target=target, headers=headers)))
    while True:
        got = conn.next_event()
        if got is h11.NEED_DATA:
            conn.receive_data(await asyncio.wait_for(reader.read(65536), limits.idle_timeout_s))
            continue
        if isinstance(got, h11.Data | h11.EndOfMessage):
            up_writer.write(out.send(got) or b"")
        if not isinstance(got, h11.Data):
            break
    await _relay(reader, writer, up_reader, up_writer, limits.idle_timeout_s, one_way=True)


def _authority(request: h11.Request) -> bytes:
    """host[:port] of the absolute URI the proxy checked: the Host header the upstream sees."""
    return request.target[7:].split(b"/", 1)[0].rpartition(b"@")[2]


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    idle_s: float,
    *,
    one_way: bool = False,
) -> None:
    """Copy both ways (only upstream to job when `one_way`) until both ends are done, or no
    byte went either way for `idle_s`."""
    moved = [True]
    pipes = [asyncio.ensure_future(_pipe(up_reader, writer, moved))]
    if not one_way:
        pipes.append(asyncio.ensure_future(_pipe(reader, up_writer, moved)))
    try:
        while pending := [p for p in pipes if not p.done()]:
            await asyncio.wait(pending, timeout=idle_s)
            if not moved[0]:
                break
            moved[0] = False
    finally:
        for pipe in pipes:
            pipe.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)
        with contextlib.suppress(Exception):
            up_writer.close()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, moved: list[bool]) -> None:
    with contextlib.suppress(OSError):
        while data := await src.read(65536):
            moved[0] = True
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
