"""When a cron trigger fires: its occurrences as UTC instants, in the trigger's time zone.

cronsim parses and steps the expression (5 fields, or 6 with seconds first). It is stepped in
naive wall time only, where it is plain calendar arithmetic; the time zone is applied here, by
one rule for every expression:

    a wall time that does not exist (spring forward) fires once, at the first valid instant
    after the gap (02:30 on the night clocks go 02:00 -> 03:00 fires at 03:00); several
    such wall times collapse into that one instant, and so does a real match there;
    a wall time that happens twice (fall back) fires once, the first time (the earlier
    offset); its second pass fires nothing.

cronsim's own zone handling follows Debian cron instead (a wildcard-hour expression skips the
missing hour and repeats the doubled one), and croniter repeats a doubled fixed time, so
neither is used for it. Mapped this way, the instants are non-decreasing in wall order, which
is what lets `next_after` and `latest` start stepping from the wall time of their instant.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

_SECOND = timedelta(seconds=1)
_MAX_STEPS = 200_000  # a sane expression meets its next instant long before this
MAX_COUNT = 10_000  # `count` stops here: a number for a log line, not an exact census


class BadSchedule(ValueError):
    pass


def zone(name: str) -> ZoneInfo:
    """The IANA zone, or BadSchedule with a one-line reason."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadSchedule(f"tz {name!r} is not an IANA time zone") from None


@dataclass(frozen=True)
class Schedule:
    cron: str
    tz: ZoneInfo

    @classmethod
    def of(cls, cron: str, tz: str = "UTC") -> Schedule:
        fields = cron.split()
        if len(fields) not in (5, 6):
            raise BadSchedule(f"cron {cron!r} needs 5 fields, or 6 with seconds first")
        try:
            CronSim(cron, datetime(2000, 1, 1))
        except (CronSimError, ValueError) as exc:
            raise BadSchedule(f"cron {cron!r}: {exc}") from None
        return cls(" ".join(fields), zone(tz))

    def next_after(self, ms: int) -> int:
        """The first occurrence strictly after `ms` (epoch milliseconds)."""
        for at in self._forward(ms):
            return at
        raise BadSchedule(f"cron {self.cron!r} has no occurrence ahead")

    def upcoming(self, after_ms: int, until_ms: int, most: int) -> list[int]:
        """Occurrences in (after_ms, until_ms], at least the first one, at most `most`."""
        found: list[int] = []
        for at in self._forward(after_ms):
            if len(found) >= most or (found and at > until_ms):
                break
            found.append(at)
        return found

    def count(self, after_ms: int, until_ms: int) -> int:
        """How many occurrences lie in (after_ms, until_ms], up to MAX_COUNT."""
        n = 0
        for at in self._forward(after_ms):
            if at > until_ms or n >= MAX_COUNT:
                break
            n += 1
        return n

    def latest(self, ms: int) -> int | None:
        """The last occurrence at or before `ms`."""
        wall = _wall(ms, self.tz) + _behind(ms, self.tz) + _SECOND
        steps = CronSim(self.cron, wall, reverse=True)
        for _ in range(_MAX_STEPS):
            try:
                at = _instant(next(steps), self.tz)
            except StopIteration:
                return None
            if at <= ms:
                return at
        return None

    def _forward(self, after_ms: int) -> Iterator[int]:
        """Occurrences strictly after `after_ms`, each once, in order."""
        last = after_ms
        steps = CronSim(self.cron, _wall(after_ms, self.tz))
        for _ in range(_MAX_STEPS):
            try:
                at = _instant(next(steps), self.tz)
            except StopIteration:
                return
            if at > last:
                last = at
                yield at


def _wall(ms: int, tz: ZoneInfo) -> datetime:
    """The naive wall time of an instant, to the second."""
    moment = datetime.fromtimestamp(ms // 1000, UTC).astimezone(tz)
    return moment.replace(tzinfo=None)


def _behind(ms: int, tz: ZoneInfo) -> timedelta:
    """In the second pass of a doubled hour, how far the first pass's wall clock ran ahead:
    wall times up to this much later were first lived before `ms`."""
    moment = datetime.fromtimestamp(ms // 1000, UTC).astimezone(tz)
    wall = moment.replace(tzinfo=None)
    first = wall.replace(tzinfo=tz, fold=0)
    shift = (first.utcoffset() or timedelta()) - (moment.utcoffset() or timedelta())
    return max(shift, timedelta())


def _instant(wall: datetime, tz: ZoneInfo) -> int:
    """Epoch ms at which a wall time fires: its first pass, or the end of its gap."""
    first = wall.replace(tzinfo=tz, fold=0)
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall:
        return int(first.timestamp()) * 1000
    return _gap_end(wall, tz)


def _gap_end(wall: datetime, tz: ZoneInfo) -> int:
    """The transition that skipped `wall`: bisected between its two readings, to the second."""
    lo = int(wall.replace(tzinfo=tz, fold=1).timestamp())  # after-offset: the earlier reading
    hi = int(wall.replace(tzinfo=tz, fold=0).timestamp())
    return _transition(min(lo, hi), max(lo, hi), tz) * 1000


def _offset(seconds: int, tz: ZoneInfo) -> timedelta:
    return datetime.fromtimestamp(seconds, tz).utcoffset() or timedelta()


@lru_cache(maxsize=64)
def zone_digest(name: str) -> str:
    """The zone's transitions 2020-2040 as text, to the second: two hosts whose tz databases
    disagree on those years read different digests."""
    tz = zone(name)
    start = int(datetime(2020, 1, 1, tzinfo=UTC).timestamp())
    day = 86_400
    parts = []
    before = _offset(start, tz)
    for n in range(1, 20 * 366):
        now = _offset(start + n * day, tz)
        if now != before:
            at = _transition(start + (n - 1) * day, start + n * day, tz)
            parts.append(f"{at}:{int(now.total_seconds())}")
            before = now
    return f"{int(_offset(start, tz).total_seconds())};" + ",".join(parts)


def _transition(lo: int, hi: int, tz: ZoneInfo) -> int:
    """The first second in (lo, hi] with hi's offset, for one change between them."""
    after = _offset(hi, tz)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset(mid, tz) == after:
            hi = mid
        else:
            lo = mid
    return hi
