"""systemd's notify protocol: the daemon tells its service manager when it is ready, what it
is doing, that its loop is alive, and when it stops.

Under a unit with `Type=notify`, systemd names a datagram socket in `NOTIFY_SOCKET` (a path,
or `@name` in the abstract namespace) and, with `WatchdogSec=`, the period in `WATCHDOG_USEC`.
Each message is one datagram of `KEY=value` lines. Outside systemd neither is set and every
call here does nothing. A send that fails is logged once and never stops the daemon: the
manager is a spectator of the work, not part of it.

    READY=1       boot (reap, hand-back) is done and the claim loops run
    STATUS=...    one line, every heartbeat: "2/3 slots", or "draining: 1 running"
    WATCHDOG=1    every half period, only while `Watchdog.healthy` (the loop's own lag under
                  `LAG_MAX_S`, the lock keeper's last tick recent): a wedged loop sends none,
                  and systemd restarts the daemon
    STOPPING=1    at the start of a drain
    RELOADING=1   before a config reload is applied (with MONOTONIC_USEC), READY=1 after
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable, Mapping

from dispatch.daemon.tasks import set_within
from dispatch.log import event

LAG_MAX_S = 5.0  # a loop this late is not healthy, whatever it says
_OURS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        if env is None:  # taken out of the process's own: a job must not inherit them
            env = {k: os.environ.pop(k) for k in _OURS if k in os.environ}
        where = env.get("NOTIFY_SOCKET", "")
        self.address = "\0" + where[1:] if where.startswith("@") else where
        usec = env.get("WATCHDOG_USEC", "")
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() and int(usec) > 0 else None
        self._failed = False

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def send(self, **fields: str) -> None:
        """One datagram: `send(READY="1", STATUS="...")`."""
        if not self.address:
            return
        message = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
        try:  # a socket a message: a few a minute, and nothing to keep open or close
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(message, self.address)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                event("notify_failed", error=f"{type(exc).__name__}: {exc}")

    def ready(self, status: str = "") -> None:
        self.send(READY="1", **({"STATUS": status} if status else {}))

    def status(self, text: str) -> None:
        self.send(STATUS=text)

    def stopping(self, status: str = "draining") -> None:
        self.send(STOPPING="1", STATUS=status)

    def reloading(self) -> None:
        self.send(
            RELOADING="1", MONOTONIC_USEC=str(time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000)
        )


class Watchdog:
    """Pings every half period while healthy. `alive` says when the lock keeper last ticked
    (monotonic seconds), `every_s` how often it should; the loop's lag is how late this
    task's own sleep ended."""

    def __init__(
        self,
        notifier: Notifier,
        alive: Callable[[], float],
        every_s: float,
        monotonic: Callable[[], float] = time.monotonic,
        lag_max_s: float = LAG_MAX_S,
    ) -> None:
        self.notifier = notifier
        self.alive = alive
        self.keeper_every_s = every_s
        self._now = monotonic
        self.lag_max_s = lag_max_s
        self.lag_s = 0.0

    def healthy(self) -> bool:
        keeper_late = self._now() - self.alive() > 3 * self.keeper_every_s + self.lag_max_s
        return self.lag_s < self.lag_max_s and not keeper_late

    async def run(self, stop: asyncio.Event) -> None:
        period = self.notifier.watchdog_s
        if period is None:
            return
        half = period / 2
        while not stop.is_set():
            if self.healthy():
                self.notifier.send(WATCHDOG="1")
            asleep = self._now()
            await set_within(stop, half)
            self.lag_s = max(self._now() - asleep - half, 0.0)
