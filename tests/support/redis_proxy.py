"""A TCP proxy in front of a real redis-server that a fault test can turn bad on command.

Modes:
  pass       forward both ways (the default);
  blackhole  read requests and answer nothing, as a frozen or partitioned server does;
  refuse     close every connection and refuse new ones, as a server that is down;
  error      answer every command with one error reply (READONLY, OOM, BUSY, LOADING...),
             as a server in failover, out of memory or busy with a script.
Apart from the mode, `lagging(s)` holds every reply back `s` seconds (in order, connections
kept) while requests still reach the server at once: a client that reads its socket late,
as a frozen or overloaded daemon does, or one on a congested link.

It runs on a loop of its own in a thread, so real daemon processes and the test's own
clients can both go through it. Requests are parsed as RESP arrays, so a pipeline of n
commands gets n error replies.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

from tests.support.redis_server import free_port

READONLY = b"-READONLY You can't write against a read only replica.\r\n"


class RedisProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.mode = "pass"
        self.error = READONLY
        self.lag_s = 0.0
        self._loop = asyncio.new_event_loop()
        self._conns: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        self._call(self._close_all(listen=False))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        for task in asyncio.all_tasks(self._loop):
            task.cancel()
        self._loop.run_until_complete(asyncio.sleep(0))  # let the cancelled handlers end
        self._loop.close()

    def set_mode(self, mode: str, error: bytes = READONLY) -> None:
        """Switch. A fault also cuts the connections open now, so no reply of the old mode
        can arrive after one of the new (clients reconnect, as after a real failover)."""
        self.mode, self.error = mode, error
        if mode != "pass":
            self._call(self._close_all(listen=mode != "refuse"))
        elif self._server is None:
            self._call(self._listen())

    @contextlib.contextmanager
    def fault(self, mode: str, error: bytes = READONLY) -> Iterator[None]:
        self.set_mode(mode, error)
        try:
            yield
        finally:
            self.set_mode("pass")

    @contextlib.contextmanager
    def lagging(self, seconds: float) -> Iterator[None]:
        self.lag_s = seconds
        try:
            yield
        finally:
            self.lag_s = 0.0

    def _call(self, coro: Any) -> Any:
        done: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return done.result(timeout=10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _close_all(self, listen: bool) -> None:
        if not listen and self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._conns):
            writer.close()
        self._conns.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "refuse":
            writer.close()
            return
        self._conns.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        self._conns.add(up_writer)
        back = asyncio.ensure_future(self._copy(up_reader, writer))
        try:
            await self._requests(reader, writer, up_writer)
        finally:
            back.cancel()
            for w in (writer, up_writer):
                self._conns.discard(w)
                w.close()

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: asyncio.StreamWriter
    ) -> None:
        while True:
            request = await _read_request(reader)
            if request is None:
                return
            if self.mode == "pass":
                up.write(request)
            elif self.mode == "error":
                writer.write(self.error)
            # blackhole: swallowed, no answer

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Replies to the client, each held back by the lag in force when it arrived."""
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.ensure_future(_send_when_due(held, writer))
        try:
            with contextlib.suppress(OSError):
                while data := await reader.read(65536):
                    held.put_nowait((self._loop.time() + self.lag_s, data))
            held.put_nowait((0.0, b""))  # the server closed: what is held still goes out
            await sender
        except asyncio.CancelledError:
            pass
        finally:
            sender.cancel()


async def _send_when_due(
    held: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
) -> None:
    loop = asyncio.get_running_loop()
    while True:
        due, data = await held.get()
        if not data:
            return
        await asyncio.sleep(max(due - loop.time(), 0.0))
        with contextlib.suppress(OSError):
            writer.write(data)


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One RESP request (an array of bulk strings, or an inline command), raw."""
    try:
        head = await reader.readline()
        if not head:
            return None
        if not head.startswith(b"*"):
            return head
        parts = [head]
        for _ in range(int(head[1:])):
            size_line = await reader.readline()
            parts.append(size_line)
            parts.append(await reader.readexactly(int(size_line[1:]) + 2))
        return b"".join(parts)
    except (OSError, asyncio.IncompleteReadError, ValueError):
        return None
