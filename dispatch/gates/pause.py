"""Pause gate: a job inside an active pause window is deferred `pause-window` to the window's end.

A window's `scope` is "*" (everything), a repo "owner/name" (case-insensitive), an absolute
folder (a local job's folder equal to it or under it) or a project id. A window is either
recurring, `from`-`to` "HH:MM" wall time in `tz` on `days` (the day the window starts on; none
means every day; from > to crosses midnight; from == to is a whole day), or fixed, `start` to
`end` as ISO-8601 instants (no offset means UTC), active when start <= now < end.

Wall times become instants through zoneinfo, so a window keeps its wall times across DST. A wall
time that does not exist (skipped in spring) becomes the first instant after the gap, that is
the transition itself: 02:30 on a 02:00->03:00 day starts at 03:00. One that exists twice
(repeated in autumn) is its first occurrence.

Windows that overlap or abut chain: the job waits for the end of the whole chain, followed up
to a week ahead (past that the job simply looks again then). The job is deferred only when that
end is more than 1 s away, so a boundary tick does not busy-defer. A row that cannot be read is
skipped here; `window_problems` names what is wrong with it so the config loader can refuse the
file before it ever gets here.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dispatch.clock import Clock
from dispatch.config.schemas import ConfigSnapshot, PauseWindow
from dispatch.gates.base import ADMIT, Decision, Defer, Pickup
from dispatch.gates.project import within
from dispatch.model import Job
from dispatch.reasons import PAUSE_WINDOW

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MIN_DEFER_MS = 1_000
CHAIN_HORIZON_MS = 7 * 24 * 3_600_000
_MAX_LINKS = 1_000  # a guard only: links are a minute or longer, so the horizon ends a chain first
_HH_MM = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class _Fixed:
    start_ms: int
    end_ms: int

    def end_covering(self, t_ms: int) -> int | None:
        return self.end_ms if self.start_ms <= t_ms < self.end_ms else None


@dataclass(frozen=True, slots=True)
class _Recurring:
    start: time
    end: time
    tz: ZoneInfo
    days: frozenset[int]  # weekday numbers, Monday 0; empty: every day

    def end_covering(self, t_ms: int) -> int | None:
        today = _wall(t_ms, self.tz).date()
        # an occurrence lasts at most about a day, so only yesterday's or today's can cover t
        for day in (today - timedelta(days=1), today):
            if self.days and day.weekday() not in self.days:
                continue
            start_ms, end_ms = _occurrence(self, day)
            if start_ms <= t_ms < end_ms:
                return end_ms
        return None


@functools.lru_cache(maxsize=1024)
def _occurrence(schedule: _Recurring, day: date) -> tuple[int, int]:
    """Start and end of the occurrence that starts on `day`. Every pickup of the day asks the
    same question, and the zone arithmetic is most of a check's cost: computed once."""
    start_ms = _instant(day, schedule.start, schedule.tz)
    end_day = day if schedule.end > schedule.start else day + timedelta(days=1)
    return start_ms, _instant(end_day, schedule.end, schedule.tz)


_Schedule = _Fixed | _Recurring
_Readable = list[tuple[_Schedule, PauseWindow]]


def window_problems(window: PauseWindow) -> list[str]:
    """What makes this row unreadable, in plain words; empty when it is a valid window."""
    return _read(window)[1]


def active_until(window: PauseWindow, t_ms: int) -> int | None:
    """The end of this window's occurrence that covers `t_ms`, or None (also for a bad row)."""
    schedule = _read(window)[0]
    return schedule.end_covering(t_ms) if schedule is not None else None


def applies(window: PauseWindow, job: Job, project_id: str | None) -> bool:
    """Whether the window's scope takes in this job."""
    scope = window.scope
    if scope == "*" or scope == project_id:
        return True
    if job.repo and scope.casefold() == job.repo.casefold():
        return True
    if job.kind == "local" and job.folder and scope.startswith("/"):
        return within(job.folder, scope)
    return False


def pause_until(
    windows: Iterable[PauseWindow], job: Job, project_id: str | None, now_ms: int
) -> tuple[int, PauseWindow] | None:
    """The end of the chain of windows pausing this job now, and the window that ends it;
    None when no window covers `now_ms`."""
    return _chain(_readable(windows), job, project_id, now_ms)


def _readable(windows: Iterable[PauseWindow]) -> _Readable:
    """Every row that reads as a window, with its schedule; a bad row is skipped."""
    return [(schedule, w) for w in windows if (schedule := _read(w)[0]) is not None]


def _chain(
    readable: _Readable, job: Job, project_id: str | None, now_ms: int
) -> tuple[int, PauseWindow] | None:
    schedules = [(s, w) for s, w in readable if applies(w, job, project_id)]
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


def _longest(schedules: _Readable, t_ms: int) -> tuple[int, PauseWindow] | None:
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
        found = _chain(self._read_once(pickup.config.windows), pickup.job, project_id, now_ms)
        if found is None or found[0] - now_ms <= MIN_DEFER_MS:
            return ADMIT
        end_ms, window = found
        return Defer(end_ms - now_ms, PAUSE_WINDOW, detail=describe(window, end_ms))

    def _read_once(self, windows: tuple[PauseWindow, ...]) -> _Readable:
        """The rows are read once per config snapshot, not once per pickup."""
        if windows is not self._windows:
            self._windows, self._readable = windows, _readable(windows)
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
    until = _wall(end_ms, _zone(window.tz) or ZoneInfo("UTC"))
    when = until.strftime("%Y-%m-%d %H:%M:%S" if until.second else "%Y-%m-%d %H:%M")
    return f"paused by window {span} for {who} until {when} {window.tz}"


# Reading a row: one pass that yields the schedule or the problems, so the loader and the gate
# can never disagree about what a row means.


def _read(window: PauseWindow) -> tuple[_Schedule | None, list[str]]:
    problems = [] if window.scope else ['scope is empty; use "*", a repo, a folder or a project']
    recurring = window.from_ is not None or window.to is not None
    fixed = window.start is not None or window.end is not None
    if recurring and fixed:
        return None, [*problems, "give either from/to (recurring) or start/end (fixed), not both"]
    if not (recurring or fixed):
        return None, [*problems, "give from/to (recurring) or start/end (fixed)"]
    schedule, more = _read_recurring(window) if recurring else _read_fixed(window)
    problems += more
    return (schedule if not problems else None), problems


def _read_recurring(window: PauseWindow) -> tuple[_Schedule | None, list[str]]:
    start, end = _hh_mm(window.from_), _hh_mm(window.to)
    tz = _zone(window.tz)
    problems = [
        f"{name} {value!r} is not HH:MM between 00:00 and 23:59"
        for name, value, parsed in (("from", window.from_, start), ("to", window.to, end))
        if parsed is None
    ]
    if tz is None:
        problems.append(f"tz {window.tz!r} is not a known time zone")
    problems += [f"day {d!r} is not one of {', '.join(DAYS)}" for d in window.days if d not in DAYS]
    if problems or start is None or end is None or tz is None:
        return None, problems
    return _Recurring(start, end, tz, frozenset(DAYS.index(d) for d in window.days)), []


def _read_fixed(window: PauseWindow) -> tuple[_Schedule | None, list[str]]:
    start, end = _iso_ms(window.start), _iso_ms(window.end)
    problems = [
        f"{name} {value!r} is not an ISO-8601 instant"
        for name, value, parsed in (("start", window.start, start), ("end", window.end, end))
        if parsed is None
    ]
    if start is not None and end is not None and start >= end:
        problems.append("start must be before end")
    if window.days:
        problems.append("days apply only to recurring (from/to) windows")
    if window.tz != "UTC":
        # a fixed window's zone would be ignored; refuse it rather than misread the operator
        problems.append("tz applies only to recurring windows; give start and end an offset")
    if problems or start is None or end is None:
        return None, problems
    return _Fixed(start, end), []


def _hh_mm(value: str | None) -> time | None:
    match = _HH_MM.fullmatch(value or "")
    return time(int(match[1]), int(match[2])) if match else None


def _zone(name: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def _iso_ms(value: str | None) -> int | None:
    try:
        parsed = datetime.fromisoformat(value or "")
    except ValueError:
        return None
    return _ms(parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC))


# Instants: epoch milliseconds, computed exactly (no float seconds).


def _ms(moment: datetime) -> int:
    return (moment - _EPOCH) // _MS


def _wall(t_ms: int, tz: ZoneInfo) -> datetime:
    return (_EPOCH + t_ms * _MS).astimezone(tz)


def _instant(day: date, at: time, tz: ZoneInfo) -> int:
    """Wall time `at` on `day` in `tz` as an instant; fold 0 takes an ambiguous time's first
    occurrence, and a time in a gap becomes the gap's end (see the module docstring)."""
    wall = datetime.combine(day, at, tzinfo=tz)
    after_ms = _ms(wall)  # fold 0 reads a gap time with the old offset: past the transition
    if _wall(after_ms, tz).replace(tzinfo=None) == wall.replace(tzinfo=None):
        return after_ms
    return _transition(_ms(wall.replace(fold=1)), after_ms, tz)


def _transition(before_ms: int, after_ms: int, tz: ZoneInfo) -> int:
    """The first instant in (before_ms, after_ms] with the later offset, to the second."""
    offset = _wall(after_ms, tz).utcoffset()
    lo, hi = before_ms // 1000, -(-after_ms // 1000)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _wall(mid * 1000, tz).utcoffset() == offset:
            hi = mid
        else:
            lo = mid
    return hi * 1000
