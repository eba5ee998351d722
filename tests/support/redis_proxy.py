"""A TCP proxy in front of a real redis-server that a fault test can turn bad on command.

Modes:
  pass       forward both ways (the default);
  blackhole  read requests and answer nothing, as a frozen or partitioned server does;
  refuse     close every connection and refuse new ones, as a server that is down;
  error      answer every command with one error reply (READONLY, OOM, BUSY, LOADING...),
             as a server in failover, out of memory or busy with a script;
  deaf       forward requests but drop every reply: the command runs, its answer is lost.
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
import socket
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
        self._listener: socket.socket | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        self._call(self._shut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def set_mode(self, mode: str, error: bytes = READONLY) -> None:
        """Switch. A fault also cuts the connections open now, so no reply of the old mode
        can arrive after one of the new (clients reconnect, as after a real failover)."""
        self.mode, self.error = mode, error
        if mode not in ("pass", "deaf"):  # deaf keeps connections: a timeout ends each one
            self._call(self._close_all(listen=mode != "refuse"))
        elif self._listener is None:
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
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        listener.setblocking(False)
        self._listener = listener
        asyncio.get_running_loop().add_reader(listener.fileno(), self._accept, listener)

    def _accept(self, listener: socket.socket) -> None:
        """Take every pending connection. Not asyncio.start_server nor sock_accept: on Python
        3.11 both can leave a connection accepted in the turn they are closed (or cancelled)
        half made, its socket open until the GC warns about it."""
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # BlockingIOError: none left
                return
            conn.setblocking(False)
            task = asyncio.ensure_future(self._serve_socket(conn))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    def _stop_listening(self) -> None:
        if self._listener is not None:
            asyncio.get_running_loop().remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None

    async def _serve_socket(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=conn)
        except OSError:
            conn.close()
            return
        await self._serve(reader, writer)

    async def _close_all(self, listen: bool) -> None:
        if not listen:
            self._stop_listening()
        for writer in list(self._conns):
            writer.close()
        self._conns.clear()

    async def _shut(self) -> None:
        """Close everything, and let every handler end (a cancelled handler that never ran
        would leave its socket open until the GC, which warns), so the loop can close clean."""
        await self._close_all(listen=False)
        while handlers := asyncio.all_tasks() - {asyncio.current_task()}:
            _, hung = await asyncio.wait(handlers, timeout=2)
            for task in hung:  # a client still connected through a handler started late
                task.cancel()
            await asyncio.gather(*hung, return_exceptions=True)
        await asyncio.sleep(0.01)  # closed transports drop their sockets on the next turns

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "refuse":
            writer.close()
            return
        opened = [writer]
        self._conns.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            opened.append(up_writer)
            self._conns.add(up_writer)
            back = asyncio.ensure_future(self._copy(up_reader, writer))
            try:
                await self._requests(reader, writer, up_writer)
            finally:
                back.cancel()
        except OSError:
            return
        finally:  # whatever ended it, a cancellation included
            for w in opened:
                self._conns.discard(w)
                w.close()

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: asyncio.StreamWriter
    ) -> None:
        while True:
            request = await _read_request(reader)
            if request is None:
                return
            if self.mode in ("pass", "deaf"):
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
                    if self.mode != "deaf":
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
