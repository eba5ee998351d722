"""A notify socket as systemd binds it: a datagram socket in a temporary dir, read on a thread
of its own so that arrivals are timed even while the test's event loop is blocked on purpose.
Each message is (monotonic arrival, {KEY: value})."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

Message = tuple[float, dict[str, str]]


class Listener:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.messages: list[Message] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))
        self._sock.settimeout(0.1)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._done.is_set():
            try:
                data = self._sock.recv(4096)
            except TimeoutError:
                continue
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
            self.messages.append((time.monotonic(), fields))

    def said(self) -> list[str]:
        """Each message's first key, in order of arrival: READY, STATUS, WATCHDOG..."""
        return [next(iter(fields)) for _, fields in list(self.messages)]

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=2)
        self._sock.close()


@contextmanager
def listening(path: Path) -> Iterator[Listener]:
    found = Listener(path)
    try:
        yield found
    finally:
        found.close()
