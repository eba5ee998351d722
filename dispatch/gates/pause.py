"""Pause gate: a job inside an active pause window is deferred `pause-window` to the window's end.

What a window row means (recurring or fixed, wall times across DST, what makes a row
unreadable) is the pause-window grammar, dispatch.config.windows; the config loader refuses a
file with a bad row by the same reading, and a bad row that gets here anyway is skipped.

A window's `scope` is "*" (everything), a repo "owner/name" (case-insensitive), an absolute
folder (a local job's folder equal to it or under it, both resolved: the job's by the folder
gate, the row's once per snapshot, so a symlink on either side changes nothing) or a project
id.

Windows that overlap or abut chain: the job waits for the end of the whole chain, followed up
to a week ahead (past that the job simply looks again then). The job is deferred only when that
end is more than 1 s away, so a boundary tick does not busy-defer.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from zoneinfo import ZoneInfo

import anyio

from dispatch.clock import Clock
from dispatch.config.schemas import ConfigSnapshot, PauseWindow
from dispatch.config.windows import Schedule, schedule_of, wall, zone
from dispatch.gates.base import ADMIT, Decision, Defer, Pickup
from dispatch.gates.project import within
from dispatch.model import Job
from dispatch.reasons import PAUSE_WINDOW

MIN_DEFER_MS = 1_000
CHAIN_HORIZON_MS = 7 * 24 * 3_600_000
_MAX_LINKS = 1_000  # a guard only: links are a minute or longer, so the horizon ends a chain first

_Readable = list[tuple[Schedule, PauseWindow, str]]  # with the scope to match, resolved


def applies(
    window: PauseWindow,
    job: Job,
    project_id: str | None,
    folder: str | None = None,
    scope: str | None = None,
) -> bool:
    """Whether the window's scope (`scope`: its resolved form) takes in this job, whose folder
    is `folder` (resolved by the folder gate) or else the job's own spelling."""
    scope = window.scope if scope is None else scope
    if scope == "*" or scope == project_id:
        return True
    if job.repo and scope.casefold() == job.repo.casefold():
        return True
    if job.kind == "local" and job.folder and scope.startswith("/"):
        return within(folder or job.folder, scope)
    return False


def pause_until(
    windows: Iterable[PauseWindow], job: Job, project_id: str | None, now_ms: int
) -> tuple[int, PauseWindow] | None:
    """The end of the chain of windows pausing this job now, and the window that ends it;
    None when no window covers `now_ms`."""
    return _chain(_readable(windows), job, project_id, None, now_ms)


def _readable(windows: Iterable[PauseWindow], real: bool = False) -> _Readable:
    """Every row that reads as a window, with its schedule and the scope to match (`real`: a
    folder scope resolved, which touches the filesystem); a bad row is skipped."""
    return [
        (schedule, w, _real_scope(w.scope) if real else w.scope)
        for w in windows
        if (schedule := schedule_of(w)) is not None
    ]


def _real_scope(scope: str) -> str:
    return os.path.realpath(scope) if scope.startswith("/") else scope


def _chain(
    readable: _Readable, job: Job, project_id: str | None, folder: str | None, now_ms: int
) -> tuple[int, PauseWindow] | None:
    schedules = [(s, w) for s, w, scope in readable if applies(w, job, project_id, folder, scope)]
    found: tuple[int, PauseWindow] | None = None
    t_ms = now_ms
    for _ in range(_MAX_LINKS):
        link = _longest(schedules, t_ms)
        if link is None:
            break
        found = link
        t_ms = link[0]
        if t_ms - now_ms >= CHAIN_HORIZON_MS:
            break
    return found


def _longest(
    schedules: list[tuple[Schedule, PauseWindow]], t_ms: int
) -> tuple[int, PauseWindow] | None:
    best: tuple[int, PauseWindow] | None = None
    for schedule, window in schedules:
        end_ms = schedule.end_covering(t_ms)
        if end_ms is not None and (best is None or end_ms > best[0]):
            best = (end_ms, window)
    return best


class PauseGate:
    name = "pause"

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._windows: tuple[PauseWindow, ...] = ()
        self._readable: _Readable = []

    def inert(self, config: ConfigSnapshot) -> bool:
        return not config.windows

    async def check(self, pickup: Pickup) -> Decision:
        now_ms = self._clock.now_ms()
        project_id = pickup.project.id if pickup.project else None
        readable = await self._read_once(pickup.config.windows)
        found = _chain(readable, pickup.job, project_id, pickup.folder, now_ms)
        if found is None or found[0] - now_ms <= MIN_DEFER_MS:
            return ADMIT
        end_ms, window = found
        return Defer(end_ms - now_ms, PAUSE_WINDOW, detail=describe(window, end_ms))

    async def _read_once(self, windows: tuple[PauseWindow, ...]) -> _Readable:
        """The rows are read once per config snapshot, not once per pickup (their folders
        resolved off the event loop: a slow mount)."""
        if windows is not self._windows:
            readable = await anyio.to_thread.run_sync(_readable, windows, True)
            self._windows, self._readable = windows, readable
        return self._readable


def describe(window: PauseWindow, end_ms: int) -> str:
    """One sentence for an operator; a folder scope is named by its basename only."""
    if window.start is not None:
        span = f"{window.start} to {window.end}"
    else:
        span = f"{window.from_}-{window.to} {window.tz}"
        span += f" on {','.join(window.days)}" if window.days else ""
    scope = window.scope
    if scope == "*":
        who = "everything"
    elif scope.startswith("/"):
        who = posixpath.basename(scope.rstrip("/")) or "/"
    else:
        who = scope
    until = wall(end_ms, zone(window.tz) or ZoneInfo("UTC"))
    when = until.strftime("%Y-%m-%d %H:%M:%S" if until.second else "%Y-%m-%d %H:%M")
    return f"paused by window {span} for {who} until {when} {window.tz}"
