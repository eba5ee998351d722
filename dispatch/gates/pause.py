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

The readable windows are indexed once per snapshot by the scope they take in (`Windows`), so a
pickup reads the windows that apply to it (those on "*" and on its project, repo or folder),
not every row of the file. Those on "*" apply to every pickup: when none covers an instant,
the index keeps until when none can (the first start to come), and the pickups until then
skip them.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from zoneinfo import ZoneInfo

from dispatch.clock import Clock
from dispatch.config.schemas import ConfigSnapshot, PauseWindow
from dispatch.config.windows import NEVER_MS, Schedule, schedule_of, wall, zone
from dispatch.gates.base import ADMIT, Decision, Defer, PerSnapshot, Pickup
from dispatch.gates.project import folder_keys, root_key, within
from dispatch.model import Job
from dispatch.reasons import PAUSE_WINDOW

MIN_DEFER_MS = 1_000
CHAIN_HORIZON_MS = 7 * 24 * 3_600_000
_MAX_LINKS = 1_000  # a guard only: links are a minute or longer, so the horizon ends a chain first

_Readable = list[tuple[Schedule, PauseWindow, str]]  # with the scope to match, resolved
_Applying = list[tuple[Schedule, PauseWindow]]


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
    return _chain(Windows(_readable(windows)).applying(job, project_id, None), now_ms)


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


class Windows:
    """The readable windows of one snapshot by the scope each takes in: "*", the scope as
    written (a project id), casefolded (a repo), and a folder's `root_key`."""

    def __init__(self, readable: _Readable) -> None:
        self.readable = readable
        self.everything: list[int] = []
        self.exact: dict[str, list[int]] = {}
        self.repos: dict[str, list[int]] = {}
        self.folders: dict[str, list[int]] = {}
        self._quiet = (0, 0)  # no window on "*" covers an instant in [lo, hi)
        for i, (_, _, scope) in enumerate(readable):
            if scope == "*":
                self.everything.append(i)
            self.exact.setdefault(scope, []).append(i)
            self.repos.setdefault(scope.casefold(), []).append(i)
            if scope.startswith("/"):
                self.folders.setdefault(root_key(scope), []).append(i)

    def applying(self, job: Job, project_id: str | None, folder: str | None) -> _Applying:
        """The windows that apply to this job, as `applies` decides, in file order."""
        picked = self._own(job, project_id, folder) | set(self.everything)
        return [self.readable[i][:2] for i in sorted(picked)]

    def pause(
        self, job: Job, project_id: str | None, folder: str | None, now_ms: int
    ) -> tuple[int, PauseWindow] | None:
        """`_chain` of the windows applying to this job, skipped when none covers `now_ms`."""
        own = self._own(job, project_id, folder)
        if self._quiet_at(now_ms) and not any(self._covers(i, now_ms) for i in own):
            return None
        return _chain(self.applying(job, project_id, folder), now_ms)

    def _own(self, job: Job, project_id: str | None, folder: str | None) -> set[int]:
        """The windows applying to this job by its project, repo or folder."""
        picked: set[int] = set()
        if project_id is not None:
            picked.update(self.exact.get(project_id, ()))
        if job.repo:
            picked.update(self.repos.get(job.repo.casefold(), ()))
        if job.kind == "local" and job.folder:
            for key in folder_keys(folder or job.folder):
                picked.update(self.folders.get(key, ()))
        return picked

    def _covers(self, i: int, t_ms: int) -> bool:
        return self.readable[i][0].end_covering(t_ms) is not None

    def _quiet_at(self, now_ms: int) -> bool:
        """Whether no window on "*" covers `now_ms`, worked out again only past the last
        instant known quiet (or before it: a clock set back)."""
        lo, hi = self._quiet
        if lo <= now_ms < hi:
            return True
        if any(self._covers(i, now_ms) for i in self.everything):
            return False
        starts = (self.readable[i][0].next_start(now_ms) for i in self.everything)
        self._quiet = (now_ms, min(starts, default=NEVER_MS))
        return True


def _chain(schedules: _Applying, now_ms: int) -> tuple[int, PauseWindow] | None:
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


def _longest(schedules: _Applying, t_ms: int) -> tuple[int, PauseWindow] | None:
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
        # the rows read once per snapshot, not once per pickup
        self._index: PerSnapshot[tuple[PauseWindow, ...], Windows] = PerSnapshot(_index_real, ())

    def inert(self, config: ConfigSnapshot) -> bool:
        return not config.windows

    async def check(self, pickup: Pickup) -> Decision:
        now_ms = self._clock.now_ms()
        project_id = pickup.project.id if pickup.project else None
        index = await self._index.of(pickup.config.windows)
        found = index.pause(pickup.job, project_id, pickup.folder, now_ms)
        if found is None or found[0] - now_ms <= MIN_DEFER_MS:
            return ADMIT
        end_ms, window = found
        return Defer(end_ms - now_ms, PAUSE_WINDOW, detail=describe(window, end_ms))


def _index_real(windows: tuple[PauseWindow, ...]) -> Windows:
    """The rows read and indexed, their folders resolved."""
    return Windows(_readable(windows, real=True))


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
