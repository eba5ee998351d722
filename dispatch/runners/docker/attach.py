"""Staying attached to a started container: its exit wait and its output, across an engine
restart.

With live-restore (`"live-restore": true` in the engine's daemon.json) a container keeps
running while dockerd restarts, but every stream to the old dockerd breaks: the exit wait and
the log stream. `Attachment` holds both, and `readopt` takes them up again once the engine
answers:

    inspect   the container, retried with backoff while the engine does not answer (for at
              most `wait_s`; past it DockerUnavailable goes up, as before). Gone, or no longer
              running: `RunLost`. Its exit cannot be told from one the restart caused
              (without live-restore dockerd stops every container as it shuts down, and a job
              that exits 0 on SIGTERM would look done), so it is not believed.
    wait      `condition=not-running`, registered now: it answers at once if the container
              stopped in between, so no exit is missed.
    logs      followed again from the start, skipping the bytes already received, so the
              output file has each byte once (as long as the engine's log driver kept them,
              as json-file and local do).
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

from dispatch.clock import Clock
from dispatch.runners.docker.client import DockerClient, ExitWait
from dispatch.runners.docker.errors import ContainerNotFound, DockerUnavailable
from dispatch.runners.output import OutputFile

_FIRST_PAUSE_S = 0.25
_LONGEST_PAUSE_S = 5.0


class RunLost(Exception):
    """The container did not outlive the engine's absence (or its exit cannot be trusted)."""


class Attachment:
    def __init__(self, client: DockerClient, cid: str, waiter: ExitWait) -> None:
        self.client = client
        self.cid = cid
        self.waiter = waiter
        self.out: OutputFile | None = None
        self.received = 0  # log bytes taken from the engine so far, across every stream
        self._copy: asyncio.Future[None] | None = None

    @property
    def output_lost(self) -> bool:
        return self.out is not None and self.out.lost

    def capture(self, out: OutputFile) -> None:
        """Start copying the container's output into `out`."""
        self.out = out
        self._follow_logs()

    async def drained(self, timeout_s: float) -> None:
        """Wait until the copy has caught up with the exit (TimeoutError, DockerError)."""
        if self._copy is not None:
            await asyncio.wait_for(self._copy, timeout_s)

    async def readopt(self, wait_s: float, clock: Clock) -> None:
        """Once the engine answers again, follow the container if it still runs; else RunLost."""
        state = await self._state_when_back(wait_s, clock)
        if not state.get("Running"):
            raise RunLost(f"container {state.get('Status', 'gone')} after the engine came back")
        await self.waiter.aclose()
        self.waiter = await self.client.wait(self.cid, "not-running")
        self._follow_logs()

    async def aclose(self) -> None:
        if self._copy is not None:
            self._copy.cancel()
        await self.waiter.aclose()

    def _follow_logs(self) -> None:
        if self._copy is not None:
            self._copy.cancel()
        if self.out is None or not self.out.writing:
            return
        self._copy = asyncio.ensure_future(self._copy_logs(self.out, self.received))
        # Retrieve the outcome even when nobody awaits it (a broken stream, then a readopt).
        self._copy.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _copy_logs(self, out: OutputFile, skip: int) -> None:
        async with aclosing(self.client.logs(self.cid, follow=True)) as chunks:
            async for chunk in chunks:
                fresh = chunk[skip:]
                skip = max(skip - len(chunk), 0)
                if not fresh:
                    continue
                self.received += len(fresh)
                if not out.write(fresh):
                    return

    async def _state_when_back(self, wait_s: float, clock: Clock) -> dict[str, Any]:
        deadline = clock.monotonic() + wait_s
        pause = _FIRST_PAUSE_S
        while True:
            try:
                state: dict[str, Any] = (await self.client.inspect(self.cid)).get("State", {})
                return state
            except ContainerNotFound:
                return {"Status": "removed"}
            except DockerUnavailable:
                if clock.monotonic() >= deadline:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, _LONGEST_PAUSE_S)
