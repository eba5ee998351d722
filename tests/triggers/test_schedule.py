"""The DST rule of dispatch/triggers/schedule.py, checked against hand-written instants and,
across whole DST seasons, against a brute-force oracle that knows nothing of cronsim."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.triggers.schedule import BadSchedule, Schedule
from tests.support.triggers import ms


def local(at_ms: int, tz: str) -> str:
    return datetime.fromtimestamp(at_ms / 1000, ZoneInfo(tz)).isoformat()


def upcoming(cron: str, tz: str, start: str, n: int) -> list[str]:
    s = Schedule.of(cron, tz)
    return [local(at, tz) for at in s.upcoming(ms(start, tz), 10**15, n)]


AMS, NY = "Europe/Amsterdam", "America/New_York"


def test_a_wall_time_that_does_not_exist_fires_once_at_the_end_of_the_gap() -> None:
    assert upcoming("30 2 * * *", AMS, "2025-03-29T12:00", 2) == [
        "2025-03-30T03:00:00+02:00",
        "2025-03-31T02:30:00+02:00",
    ]
    # 02:00 and 02:30 both fall in the gap, and 03:00 is a match itself: one firing at 03:00
    assert upcoming("*/30 1-3 * * *", AMS, "2025-03-30T00:00", 4) == [
        "2025-03-30T01:00:00+01:00",
        "2025-03-30T01:30:00+01:00",
        "2025-03-30T03:00:00+02:00",
        "2025-03-30T03:30:00+02:00",
    ]
    # a minute-wildcard inside the missing hour still fires once, at its end
    assert upcoming("* 2 * * *", NY, "2025-03-08T23:00", 2) == [
        "2025-03-09T03:00:00-04:00",
        "2025-03-10T02:00:00-04:00",
    ]


def test_a_wall_time_that_happens_twice_fires_once_the_first_time() -> None:
    assert upcoming("30 2 * * *", AMS, "2025-10-25T12:00", 2) == [
        "2025-10-26T02:30:00+02:00",
        "2025-10-27T02:30:00+01:00",
    ]
    assert upcoming("0 * * * *", NY, "2025-11-02T00:00", 3) == [
        "2025-11-02T01:00:00-04:00",
        "2025-11-02T02:00:00-05:00",  # 01:00 EST is 01:00 again: not fired twice
        "2025-11-02T03:00:00-05:00",
    ]


def test_six_fields_take_seconds_first() -> None:
    assert upcoming("*/20 * * * * *", "UTC", "2025-01-01T00:00", 3) == [
        "2025-01-01T00:00:20+00:00",
        "2025-01-01T00:00:40+00:00",
        "2025-01-01T00:01:00+00:00",
    ]


@pytest.mark.parametrize(
    "cron,tz",
    [
        ("* * * *", "UTC"),
        ("* * * * * * *", "UTC"),
        ("61 * * * *", "UTC"),
        ("0 0 31 2 *", "UTC"),
        ("0 * * * *", "Mars/Olympus"),
        ("x * * * *", "UTC"),
    ],
)
def test_a_bad_schedule_is_refused_with_a_reason(cron: str, tz: str) -> None:
    with pytest.raises(BadSchedule):
        Schedule.of(cron, tz)


# -- the oracle ------------------------------------------------------------------------------


def _fields(cron: str) -> tuple[set[int], set[int]]:
    minute, hour = cron.split()[:2]
    return _field(minute, 60), _field(hour, 24)


def _field(text: str, size: int) -> set[int]:
    if text == "*":
        return set(range(size))
    if text.startswith("*/"):
        return set(range(0, size, int(text[2:])))
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def oracle(cron: str, tz: str, start_ms: int, end_ms: int) -> list[int]:
    """Minute by minute in UTC: fire at a first-pass wall time that matches, and at the end of
    a gap when any skipped wall time (or the one at the end) matches."""
    minutes, hours = _fields(cron)
    zone = ZoneInfo(tz)
    hit = lambda w: w.minute in minutes and w.hour in hours  # noqa: E731
    out = []
    u = datetime.fromtimestamp(start_ms // 60_000 * 60, UTC)
    while u.timestamp() * 1000 <= end_ms:
        w = u.astimezone(zone)
        prev = (u - timedelta(minutes=1)).astimezone(zone)
        wall = w.replace(tzinfo=None)
        first_pass = wall.replace(tzinfo=zone, fold=0).timestamp() == u.timestamp()
        skipped = []
        jump = (w.utcoffset() or timedelta()) - (prev.utcoffset() or timedelta())
        if jump > timedelta():
            step = prev.replace(tzinfo=None) + timedelta(minutes=1)
            while step < wall:
                skipped.append(step)
                step += timedelta(minutes=1)
        if (first_pass and hit(wall)) or any(hit(s) for s in skipped):
            out.append(int(u.timestamp() * 1000))
        u += timedelta(minutes=1)
    return [x for x in out if x > start_ms]


SEASONS = [
    (AMS, "2025-03-28T00:00", "2025-04-01T00:00"),
    (AMS, "2025-10-24T00:00", "2025-10-28T00:00"),
    (NY, "2025-03-07T00:00", "2025-03-11T00:00"),
    (NY, "2025-10-31T00:00", "2025-11-04T00:00"),
]
CRONS = ["30 2 * * *", "*/30 1-3 * * *", "0 * * * *", "15 1,2 * * *", "*/7 2 * * *", "* 2 * * *"]


@pytest.mark.parametrize("tz,start,end", SEASONS)
@pytest.mark.parametrize("cron", CRONS)
def test_every_occurrence_across_a_dst_change_matches_the_oracle(cron, tz, start, end) -> None:
    lo, hi = ms(start, "UTC"), ms(end, "UTC")
    s = Schedule.of(cron, tz)
    found = []
    at = lo
    while (at := s.next_after(at)) <= hi:
        found.append(at)
    assert found == oracle(cron, tz, lo, hi)
    assert len(set(found)) == len(found)


@settings(max_examples=200, deadline=None)
@given(
    cron=st.sampled_from([*CRONS, "*/2 * * * * *", "0 0 * * 0"]),
    tz=st.sampled_from([AMS, NY, "UTC", "Australia/Lord_Howe", "Antarctica/Troll"]),
    at=st.integers(ms("2024-01-01T00:00"), ms("2027-01-01T00:00")),
)
def test_latest_and_next_agree_around_any_instant(cron: str, tz: str, at: int) -> None:
    s = Schedule.of(cron, tz)
    nxt = s.next_after(at)
    latest = s.latest(at)
    assert nxt > at
    assert latest is not None and latest <= at
    assert s.next_after(latest) == nxt  # nothing fires between the two
    assert s.latest(nxt) == nxt
