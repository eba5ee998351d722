"""A blocking connection to one Redis server for a short command line: hiredis over a socket.

Importing redis-py's asyncio client takes longer (about 150 ms here) than a `dispatch submit`
should take in all. The CLI's quick commands (cli/quick.py) make a few pipelined round trips
and exit, so they speak RESP themselves: `hiredis` packs the commands and parses the replies
(the same C code redis-py's own fast path uses), this module only moves bytes.

Only what those commands need: a `redis://` or `unix://` URL, with a user, password and
database. `open` says `Unsupported` for anything else (TLS, URL options, a cluster or a node
of one, found by its `INFO cluster` in the first round trip): the caller then takes the
redis-py path, which serves all of them.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

import hiredis

from dispatch.config.redis_target import redis_target
from dispatch.errors import RedisUnavailable, RedisUnreachable

Arg = str | bytes | int | float
_READ = 65_536


class Unsupported(Exception):
    """The URL or the server is one this module leaves to redis-py."""


class ReplyError(RedisUnavailable):
    """The server answered a command with an error reply; `kind` is its first word (NOSCRIPT,
    READONLY, WRONGPASS, ...)."""

    def __init__(self, said: str) -> None:
        super().__init__(f"redis: {said}")
        self.kind = said.split(" ", 1)[0]


class Resp:
    def __init__(self, sock: socket.socket, where: str) -> None:
        self._sock = sock
        self._where = where
        self._reader = hiredis.Reader()

    @classmethod
    def open(cls, url: str, timeout_s: float) -> Resp:
        """Connected, authenticated, its database selected, and known to be no cluster node."""
        if redis_target(url).cluster:
            raise Unsupported("cluster")
        parts = urlsplit(url)
        if parts.query or parts.fragment or parts.scheme not in ("redis", "unix"):
            raise Unsupported(parts.scheme)
        hello: list[tuple[Arg, ...]] = []
        if parts.password is not None:
            user = (unquote(parts.username),) if parts.username else ()
            hello.append(("AUTH", *user, unquote(parts.password)))
        db = parts.path.strip("/") if parts.scheme == "redis" else ""
        if db and db != "0":
            hello.append(("SELECT", db))
        conn = cls(_connected(parts, timeout_s), _where(parts))
        try:
            *_, info = conn.pipeline([*hello, ("INFO", "cluster")], raise_on_error=True)
        except BaseException:
            conn.close()
            raise
        if b"cluster_enabled:1" in info:
            conn.close()
            raise Unsupported("cluster")
        return conn

    def call(self, *args: Arg) -> Any:
        return self.pipeline([args], raise_on_error=True)[0]

    def pipeline(
        self, commands: Sequence[tuple[Arg, ...]], *, raise_on_error: bool = False
    ) -> list[Any]:
        """Every command's reply in order, in one round trip; an error reply is a `ReplyError`
        in its place (raised, the first one, with `raise_on_error`)."""
        try:
            self._sock.sendall(b"".join(hiredis.pack_command(c) for c in commands))  # type: ignore[arg-type]  # its stub says one-item tuples
            replies = [self._reply() for _ in commands]
        except OSError as exc:
            self.close()
            raise RedisUnreachable(f"redis at {self._where}: {_said(exc)}") from exc
        for i, reply in enumerate(replies):
            if isinstance(reply, hiredis.ReplyError):
                replies[i] = ReplyError(str(reply))
                if raise_on_error:
                    raise replies[i]
        return replies

    def _reply(self) -> Any:
        while (reply := self._reader.gets()) is False:
            data = self._sock.recv(_READ)
            if not data:
                raise ConnectionResetError("the server closed the connection")
            self._reader.feed(data)
        return reply

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Resp:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _connected(parts: SplitResult, timeout_s: float) -> socket.socket:
    try:
        if parts.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout_s)
            try:
                sock.connect(parts.path)
            except BaseException:
                sock.close()
                raise
            return sock
        address = (parts.hostname or "localhost", parts.port or 6379)
        sock = socket.create_connection(address, timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    except OSError as exc:
        raise RedisUnreachable(f"redis at {_where(parts)}: {_said(exc)}") from exc


def _where(parts: SplitResult) -> str:
    if parts.scheme == "unix":
        return parts.path
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


def _said(exc: OSError) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    said: str = str(exc.strerror) if exc.strerror else str(exc)
    return said or type(exc).__name__
