"""Window arithmetic in the budget time zone: day, ISO week from Monday, month; across year
ends and DST days, with instants from the injected clock."""

from __future__ import annotations

import zoneinfo
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.clock import FakeClock
from dispatch.spend.windows import KINDS, Window, local_text, window

UTC = zoneinfo.ZoneInfo("UTC")
AMS = zoneinfo.ZoneInfo("Europe/Amsterdam")
ZONES = sorted(zoneinfo.available_timezones() - {"Factory", "localtime"})


def at(text: str, tz: zoneinfo.ZoneInfo = UTC) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=tz).timestamp() * 1000)


def test_a_day_turns_at_local_midnight() -> None:
    clock = FakeClock(at("2025-03-14 23:59:59", AMS))
    day = window("day", clock.now_ms(), AMS)
    assert day.period == "2025-03-14"
    assert (day.start_ms, day.end_ms) == (at("2025-03-14 00:00", AMS), at("2025-03-15 00:00", AMS))
    clock.advance(1)
    assert window("day", clock.now_ms(), AMS).period == "2025-03-15"


def test_the_iso_week_starts_monday_and_crosses_the_year_end() -> None:
    # 2024-12-30 is the Monday of ISO week 1 of 2025; 2026-01-01 is in week 1 of 2026
    week = window("week", at("2025-01-01 12:00"), UTC)
    assert week.period == "2025-W01"
    assert (week.start_ms, week.end_ms) == (at("2024-12-30 00:00"), at("2025-01-06 00:00"))
    assert window("week", at("2024-12-29 23:59"), UTC).period == "2024-W52"
    assert window("week", at("2021-01-03 12:00"), UTC).period == "2020-W53"


def test_months_turn_at_the_first_and_december_turns_into_january() -> None:
    month = window("month", at("2024-12-31 23:00"), UTC)
    assert month.period == "2024-12"
    assert month.end_ms == at("2025-01-01 00:00")
    feb = window("month", at("2024-02-29 10:00"), UTC)
    assert (feb.period, feb.end_ms) == ("2024-02", at("2024-03-01 00:00"))


def test_dst_days_are_23_and_25_hours_long() -> None:
    spring = window("day", at("2025-03-30 12:00", AMS), AMS)
    autumn = window("day", at("2025-10-26 12:00", AMS), AMS)
    assert spring.end_ms - spring.start_ms == 23 * 3_600_000
    assert autumn.end_ms - autumn.start_ms == 25 * 3_600_000


def test_a_midnight_skipped_by_dst_starts_the_day_at_the_change() -> None:
    santiago = zoneinfo.ZoneInfo("America/Santiago")  # 2022-09-11: 00:00 jumps to 01:00
    day = window("day", at("2022-09-11 12:00", santiago), santiago)
    change = at("2022-09-11 04:00")  # 00:00 at -04, the instant the clocks jumped
    assert day.start_ms == change
    assert window("day", change - 1000, santiago).period == "2022-09-10"


def test_the_same_instant_is_another_day_in_another_zone() -> None:
    instant = at("2025-01-31 23:30")
    assert window("day", instant, UTC).period == "2025-01-31"
    assert window("day", instant, AMS).period == "2025-02-01"
    assert window("month", instant, AMS).period == "2025-02"


def test_local_text_names_the_zone() -> None:
    assert local_text(at("2025-02-01 00:00", AMS), AMS) == "2025-02-01 00:00 CET"


@settings(max_examples=400, deadline=None)
@given(
    instant=st.integers(min_value=at("1990-01-01 00:00"), max_value=at("2060-01-01 00:00")),
    tz_name=st.sampled_from(ZONES),
    kind=st.sampled_from(KINDS),
)
def test_every_instant_lies_in_its_window_and_the_next_follows(instant, tz_name, kind) -> None:
    tz = zoneinfo.ZoneInfo(tz_name)
    w: Window = window(kind, instant, tz)
    assert w.start_ms <= instant < w.end_ms
    following = window(kind, w.end_ms, tz)
    assert following.start_ms == w.end_ms and following.period > w.period
    assert window(kind, w.end_ms - 1000, tz).period == w.period


@pytest.mark.parametrize("kind", KINDS)
def test_periods_sort_in_time(kind) -> None:
    first = window(kind, at("2025-12-31 12:00"), UTC)
    assert window(kind, first.end_ms, UTC).period > first.period
