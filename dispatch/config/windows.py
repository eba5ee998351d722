"""The pause-window grammar: what a row of pause-windows.json means, and when it is active.

A window is either recurring, `from`-`to` "HH:MM" wall time in `tz` on `days` (the day the
window starts on; none means every day; from > to crosses midnight; from == to is a whole day),
or fixed, `start` to `end` as ISO-8601 instants (no offset means UTC), active when
start <= now < end. Its `scope` is read by the pause gate (dispatch.gates.pause), not here.

Wall times become instants through zoneinfo, so a window keeps its wall times across DST. A wall
time that does not exist (skipped in spring) becomes the first instant after the gap, that is
the transition itself: 02:30 on a 02:00->03:00 day starts at 03:00. One that exists twice
(repeated in autumn) is its first occurrence.

`next_start` says how long a window stays inactive: no occurrence covers an instant between
one it does not cover and the next occurrence's start, since an occurrence starts on its own
wall date (wall dates never run backwards: a fall-back at midnight lands on the same date).

A row is read in one pass that yields its schedule or its problems (`schedule_of`,
`window_problems`), so the config loader (dispatch.config.watcher), which refuses a file with a
bad row, and the pause gate, which skips one, can never disagree about what a row means.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dispatch.config.schemas import PauseWindow

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HH_MM = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)")
_FORGE_REPO = re.compile(r"[A-Za-z][\w.-]*:[^/\s]+/[^/\s]+")  # github:owner/name
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
NEVER_MS = 2**62  # no start to come
_LOOK_DAYS = 8  # every weekday occurs within a week: a start is found within 8 days


@dataclass(frozen=True, slots=True)
class Fixed:
    start_ms: int
    end_ms: int

    def end_covering(self, t_ms: int) -> int | None:
        return self.end_ms if self.start_ms <= t_ms < self.end_ms else None

    def next_start(self, t_ms: int) -> int:
        """The first start after `t_ms`; NEVER_MS when the window has none to come."""
        return self.start_ms if self.start_ms > t_ms else NEVER_MS


@dataclass(frozen=True, slots=True)
class Recurring:
    start: time
    end: time
    tz: ZoneInfo
    days: frozenset[int]  # weekday numbers, Monday 0; empty: every day

    def end_covering(self, t_ms: int) -> int | None:
        today = wall(t_ms, self.tz).date()
        # an occurrence lasts at most about a day, so only yesterday's or today's can cover t
        for day in (today - timedelta(days=1), today):
            if self.days and day.weekday() not in self.days:
                continue
            start_ms, end_ms = _occurrence(self, day)
            if start_ms <= t_ms < end_ms:
                return end_ms
        return None

    def next_start(self, t_ms: int) -> int:
        """The first start of an occurrence after `t_ms` (one starting on an earlier wall
        date started before `t_ms`)."""
        today = wall(t_ms, self.tz).date()
        for ahead in range(_LOOK_DAYS):
            day = today + timedelta(days=ahead)
            if self.days and day.weekday() not in self.days:
                continue
            start_ms = _occurrence(self, day)[0]
            if start_ms > t_ms:
                return start_ms
        return t_ms + 86_400_000  # none within the days looked at: surely none in the next one


@functools.lru_cache(maxsize=1024)
def _occurrence(schedule: Recurring, day: date) -> tuple[int, int]:
    """Start and end of the occurrence that starts on `day`. Every pickup of the day asks the
    same question, and the zone arithmetic is most of a check's cost: computed once."""
    start_ms = _instant(day, schedule.start, schedule.tz)
    end_day = day if schedule.end > schedule.start else day + timedelta(days=1)
    return start_ms, _instant(end_day, schedule.end, schedule.tz)


Schedule = Fixed | Recurring


def window_problems(window: PauseWindow) -> list[str]:
    """What makes this row unreadable, in plain words; empty when it is a valid window."""
    return _read(window)[1]


def schedule_of(window: PauseWindow) -> Schedule | None:
    """The row's schedule, or None for a row that does not read as a window."""
    return _read(window)[0]


def active_until(window: PauseWindow, t_ms: int) -> int | None:
    """The end of this window's occurrence that covers `t_ms`, or None (also for a bad row)."""
    schedule = schedule_of(window)
    return schedule.end_covering(t_ms) if schedule is not None else None


def _scope_problems(scope: str) -> list[str]:
    """A scope that reads as another grammar's would pause no job: say what to write instead."""
    if not scope:
        return ['scope is empty; use "*", a repo, a folder or a project']
    prefix, colon, rest = scope.partition(":")
    if not colon or scope.startswith("/"):
        return []
    if prefix == "project":
        return [f'scope {scope!r} names no job here; give the project id alone ("{rest}")']
    if prefix == "model":
        return [f"scope {scope!r}: pause windows take no model scope (spend caps do)"]
    if _FORGE_REPO.fullmatch(scope):
        return [f'scope {scope!r} names a forge; give the repo alone ("{rest}")']
    return []  # a project id may hold a colon


def _read(window: PauseWindow) -> tuple[Schedule | None, list[str]]:
    problems = _scope_problems(window.scope)
    recurring = window.from_ is not None or window.to is not None
    fixed = window.start is not None or window.end is not None
    if recurring and fixed:
        return None, [*problems, "give either from/to (recurring) or start/end (fixed), not both"]
    if not (recurring or fixed):
        return None, [*problems, "give from/to (recurring) or start/end (fixed)"]
    schedule, more = _read_recurring(window) if recurring else _read_fixed(window)
    problems += more
    return (schedule if not problems else None), problems


def _read_recurring(window: PauseWindow) -> tuple[Schedule | None, list[str]]:
    start, end = _hh_mm(window.from_), _hh_mm(window.to)
    tz = zone(window.tz)
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
    return Recurring(start, end, tz, frozenset(DAYS.index(d) for d in window.days)), []


def _read_fixed(window: PauseWindow) -> tuple[Schedule | None, list[str]]:
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
    return Fixed(start, end), []


def _hh_mm(value: str | None) -> time | None:
    match = _HH_MM.fullmatch(value or "")
    return time(int(match[1]), int(match[2])) if match else None


def zone(name: str) -> ZoneInfo | None:
    """The named time zone, or None when there is no such zone."""
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


def wall(t_ms: int, tz: ZoneInfo) -> datetime:
    """The instant `t_ms` as wall time in `tz`."""
    return (_EPOCH + t_ms * _MS).astimezone(tz)


def _instant(day: date, at: time, tz: ZoneInfo) -> int:
    """Wall time `at` on `day` in `tz` as an instant; fold 0 takes an ambiguous time's first
    occurrence, and a time in a gap becomes the gap's end (see the module docstring)."""
    moment = datetime.combine(day, at, tzinfo=tz)
    after_ms = _ms(moment)  # fold 0 reads a gap time with the old offset: past the transition
    if wall(after_ms, tz).replace(tzinfo=None) == moment.replace(tzinfo=None):
        return after_ms
    return _transition(_ms(moment.replace(fold=1)), after_ms, tz)


def _transition(before_ms: int, after_ms: int, tz: ZoneInfo) -> int:
    """The first instant in (before_ms, after_ms] with the later offset, to the second."""
    offset = wall(after_ms, tz).utcoffset()
    lo, hi = before_ms // 1000, -(-after_ms // 1000)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if wall(mid * 1000, tz).utcoffset() == offset:
            hi = mid
        else:
            lo = mid
    return hi * 1000
