from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.clock import FakeClock
from dispatch.config.schemas import ConfigSnapshot, PauseWindow, Project
from dispatch.config.windows import (
    DAYS,
    Recurring,
    Schedule,
    active_until,
    schedule_of,
    window_problems,
)
from dispatch.gates.base import Admit, Defer, Pickup
from dispatch.gates.pause import (
    CHAIN_HORIZON_MS,
    MIN_DEFER_MS,
    PauseGate,
    applies,
    pause_until,
)
from dispatch.model import Job
from tests.support.pickups import pickup_of

AMS = ZoneInfo("Europe/Amsterdam")
FORGE = Job(id="j1", kind="forge", repo="acme/web", number=7)
LOCAL = Job(id="j1", kind="local", folder="/srv/site/sub")
NIGHT = PauseWindow(scope="*", from_="22:00", to="06:00", tz="Europe/Amsterdam")


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def utc(text: str) -> int:
    return ms(datetime.fromisoformat(text).replace(tzinfo=UTC))


def ams(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return ms(datetime(year, month, day, hour, minute, tzinfo=AMS))


def pickup(job: Job = FORGE, *windows: PauseWindow, project: str | None = None) -> Pickup:
    found = Project(id=project) if project else None
    return pickup_of(job, config=ConfigSnapshot(windows=windows), project=found)


def until(windows: list[PauseWindow], now_ms: int, job: Job = FORGE) -> int | None:
    found = pause_until(windows, job, None, now_ms)
    return found[0] if found else None


@pytest.mark.anyio
async def test_a_night_window_over_a_whole_day_in_quarter_hours() -> None:
    start = ams(2024, 1, 15)
    clock = FakeClock(start)
    gate = PauseGate(clock)
    admitted = 0
    for _ in range(97):
        now = clock.now_ms()
        local = datetime.fromtimestamp(now / 1000, AMS)
        decision = await gate.check(pickup(FORGE, NIGHT))
        if 6 <= local.hour < 22:
            assert decision == Admit(), local
            admitted += 1
        else:
            day = local.date() + timedelta(days=1 if local.hour >= 22 else 0)
            end = ms(datetime.combine(day, datetime.min.time(), AMS).replace(hour=6))
            assert isinstance(decision, Defer), local
            assert (decision.reason, decision.delay_ms) == ("pause-window", end - now)
            assert "22:00-06:00 Europe/Amsterdam for everything" in decision.detail
        clock.advance(15 * 60)
    assert admitted == 16 * 4  # 06:00-22:00; the other 33 quarter-hours (00:00 to 24:00) wait


def test_days_name_the_day_a_window_starts_on() -> None:
    monday_nights = [PauseWindow(from_="22:00", to="06:00", tz="Europe/Amsterdam", days=["mon"])]
    assert until(monday_nights, ams(2024, 1, 15, 23)) == ams(2024, 1, 16, 6)  # Monday
    assert until(monday_nights, ams(2024, 1, 16, 2)) == ams(2024, 1, 16, 6)  # Monday's night
    assert until(monday_nights, ams(2024, 1, 16, 23)) is None  # Tuesday
    assert until(monday_nights, ams(2024, 1, 15, 2)) is None  # Sunday's night


def test_from_equal_to_is_a_whole_day() -> None:
    wednesdays = [PauseWindow(from_="09:00", to="09:00", tz="Europe/Amsterdam", days=["wed"])]
    assert until(wednesdays, ams(2024, 1, 17, 9)) == ams(2024, 1, 18, 9)
    assert until(wednesdays, ams(2024, 1, 18, 8, 59)) == ams(2024, 1, 18, 9)
    assert until(wednesdays, ams(2024, 1, 17, 8, 59)) is None
    assert until(wednesdays, ams(2024, 1, 18, 9)) is None


def test_a_same_day_window_does_not_cross_midnight() -> None:
    lunch = [PauseWindow(from_="12:00", to="13:30", tz="UTC")]
    assert until(lunch, utc("2024-01-15T12:00")) == utc("2024-01-15T13:30")
    assert until(lunch, utc("2024-01-15T13:30")) is None
    assert until(lunch, utc("2024-01-15T23:00")) is None


def test_spring_forward_keeps_wall_times() -> None:
    # 2024-03-31 02:00 CET jumps to 03:00 CEST in Amsterdam: that night is an hour shorter
    assert until([NIGHT], utc("2024-03-30T21:30")) == utc("2024-03-31T04:00")
    whole_sunday = [PauseWindow(from_="00:00", to="00:00", tz="Europe/Amsterdam", days=["sun"])]
    assert until(whole_sunday, utc("2024-03-30T23:00")) == utc("2024-03-31T22:00")  # 23 h


def test_a_wall_time_that_does_not_exist_starts_at_the_transition() -> None:
    skipped = [PauseWindow(from_="02:30", to="04:00", tz="Europe/Amsterdam")]
    assert until(skipped, utc("2024-03-31T00:59:59")) is None
    assert until(skipped, utc("2024-03-31T01:00")) == utc("2024-03-31T02:00")
    inside_gap = [PauseWindow(from_="02:15", to="02:45", tz="Europe/Amsterdam")]
    assert until(inside_gap, utc("2024-03-31T01:00")) is None  # empty that day
    assert until(inside_gap, utc("2024-04-01T00:20")) == utc("2024-04-01T00:45")


def test_fall_back_takes_the_first_of_a_repeated_time() -> None:
    # 2024-10-27 03:00 CEST falls back to 02:00 CET: that night is an hour longer
    assert until([NIGHT], utc("2024-10-26T20:00")) == utc("2024-10-27T05:00")
    repeated = [PauseWindow(from_="02:30", to="03:30", tz="Europe/Amsterdam")]
    assert until(repeated, utc("2024-10-27T00:29")) is None
    assert until(repeated, utc("2024-10-27T00:30")) == utc("2024-10-27T02:30")
    assert until(repeated, utc("2024-10-27T01:45")) == utc("2024-10-27T02:30")  # 02:45 CET


def test_fixed_windows_are_half_open_and_read_offsets() -> None:
    freeze = [PauseWindow(start="2024-05-01T10:00:00Z", end="2024-05-01T14:00:00+02:00")]
    assert until(freeze, utc("2024-05-01T10:00") - 1) is None
    assert until(freeze, utc("2024-05-01T10:00")) == utc("2024-05-01T12:00")
    assert until(freeze, utc("2024-05-01T12:00") - 1) == utc("2024-05-01T12:00")
    assert until(freeze, utc("2024-05-01T12:00")) is None
    naive = [PauseWindow(start="2024-05-01T10:00", end="2024-05-01T12:00")]
    assert until(naive, utc("2024-05-01T11:00")) == utc("2024-05-01T12:00")


@pytest.mark.anyio
async def test_overlapping_and_abutting_windows_chain() -> None:
    last = PauseWindow(scope="acme/web", from_="14:00", to="15:00")
    windows = [
        PauseWindow(start="2024-05-01T10:00Z", end="2024-05-01T12:00Z"),
        PauseWindow(start="2024-05-01T11:00Z", end="2024-05-01T14:00Z"),  # overlaps
        last,  # abuts
        PauseWindow(start="2024-05-01T15:00:01Z", end="2024-05-01T16:00Z"),  # a second apart
        PauseWindow(scope="other/repo", start="2024-05-01T15:00Z", end="2024-05-01T18:00Z"),
    ]
    now = utc("2024-05-01T10:30")
    assert pause_until(windows, FORGE, None, now) == (utc("2024-05-01T15:00"), last)
    decision = await PauseGate(FakeClock(now)).check(pickup(FORGE, *windows))
    assert decision == Defer(
        utc("2024-05-01T15:00") - now,
        "pause-window",
        detail="paused by window 14:00-15:00 UTC for acme/web until 2024-05-01 15:00 UTC",
    )


def test_recurring_windows_chain_across_midnight() -> None:
    morning = PauseWindow(from_="06:00", to="08:00", tz="Europe/Amsterdam")
    assert until([NIGHT, morning], ams(2024, 1, 15, 23)) == ams(2024, 1, 16, 8)


def test_a_window_that_never_ends_is_followed_a_week_at_most() -> None:
    always = [PauseWindow(from_="00:00", to="00:00", tz="UTC")]
    end = until(always, utc("2024-01-01T12:00"))
    assert end is not None
    assert CHAIN_HORIZON_MS <= end - utc("2024-01-01T12:00") < CHAIN_HORIZON_MS + 86_400_000


@pytest.mark.anyio
async def test_an_end_at_most_a_second_away_admits() -> None:
    window = PauseWindow(start="2024-05-01T10:00Z", end="2024-05-01T12:00Z")
    end = utc("2024-05-01T12:00")
    assert await PauseGate(FakeClock(end - 1_000)).check(pickup(FORGE, window)) == Admit()
    decision = await PauseGate(FakeClock(end - 1_001)).check(pickup(FORGE, window))
    assert isinstance(decision, Defer) and decision.delay_ms == 1_001


@pytest.mark.parametrize(
    ("scope", "job", "project", "expected"),
    [
        ("*", FORGE, None, True),
        ("*", Job(id="j1"), None, True),
        ("ACME/Web", FORGE, None, True),
        ("acme/webapp", FORGE, None, False),
        ("/srv/site", LOCAL, None, True),
        ("/srv/site/", LOCAL, None, True),
        ("/srv/site/sub", LOCAL, None, True),
        ("/srv/sit", LOCAL, None, False),
        ("/srv/site", Job(id="j1", kind="forge", repo="a/b", folder="/srv/site"), None, False),
        ("web", FORGE, "web", True),
        ("web", FORGE, "other", False),
        ("web", FORGE, None, False),
    ],
)
def test_scope_matching(scope: str, job: Job, project: str | None, expected: bool) -> None:
    assert applies(PauseWindow(scope=scope, from_="00:00", to="00:00"), job, project) is expected


@pytest.mark.anyio
async def test_the_gate_reads_the_picked_up_project() -> None:
    window = PauseWindow(scope="web", from_="00:00", to="00:00")
    gate = PauseGate(FakeClock(utc("2024-01-01T12:00")))
    assert await gate.check(pickup(FORGE, window)) == Admit()
    assert isinstance(await gate.check(pickup(FORGE, window, project="web")), Defer)


@pytest.mark.anyio
async def test_a_folder_scope_is_named_by_its_basename_only() -> None:
    window = PauseWindow(scope="/srv/private/site", from_="00:00", to="00:00", days=["mon"])
    job = Job(id="j1", kind="local", folder="/srv/private/site")
    decision = await PauseGate(FakeClock(utc("2024-01-15T12:00"))).check(pickup(job, window))
    assert isinstance(decision, Defer)
    assert "/srv" not in decision.detail
    assert decision.detail == (
        "paused by window 00:00-00:00 UTC on mon for site until 2024-01-16 00:00 UTC"
    )


@pytest.mark.parametrize(
    ("window", "problem"),
    [
        (PauseWindow(from_="24:00", to="06:00"), "from '24:00' is not HH:MM"),
        (PauseWindow(from_="22:00", to="6"), "to '6' is not HH:MM"),
        (PauseWindow(from_="22:00", to="06:60"), "to '06:60' is not HH:MM"),
        (PauseWindow(from_="22:00"), "to None is not HH:MM"),
        (PauseWindow(from_="22:00", to="06:00", tz="Mars/Olympus"), "tz 'Mars/Olympus'"),
        (PauseWindow(from_="22:00", to="06:00", tz="../etc/passwd"), "tz '../etc/passwd'"),
        (PauseWindow(from_="22:00", to="06:00", days=["monday"]), "day 'monday'"),
        (PauseWindow(start="2024-05-01T12:00Z", end="2024-05-01T10:00Z"), "start must be before"),
        (PauseWindow(start="2024-05-01T12:00Z", end="2024-05-01T12:00Z"), "start must be before"),
        (PauseWindow(start="tomorrow", end="2024-05-01T12:00Z"), "start 'tomorrow' is not an ISO"),
        (PauseWindow(start="2024-05-01T12:00Z"), "end None is not an ISO-8601"),
        (PauseWindow(start="2024-05-01", end="2024-05-02", days=["mon"]), "days apply only"),
        (PauseWindow(start="2024-05-01", end="2024-05-02", tz="Europe/Amsterdam"), "tz applies"),
        (PauseWindow(from_="22:00", to="06:00", start="2024-05-01"), "not both"),
        (PauseWindow(), "give from/to (recurring) or start/end (fixed)"),
        (PauseWindow(scope="", from_="22:00", to="06:00"), "scope is empty"),
    ],
)
def test_window_problems_name_what_is_wrong(window: PauseWindow, problem: str) -> None:
    problems = window_problems(window)
    assert any(problem in p for p in problems), problems


def test_good_rows_have_no_problems() -> None:
    good = [
        NIGHT,
        PauseWindow(scope="acme/web", from_="7:05", to="23:59", days=list(DAYS)),
        PauseWindow(scope="/srv/site", start="2024-05-01", end="2024-05-01T00:00:01+00:00"),
    ]
    assert [window_problems(w) for w in good] == [[], [], []]


def test_a_broken_row_is_skipped_at_gate_time() -> None:
    broken = PauseWindow(from_="25:00", to="06:00")
    assert active_until(broken, utc("2024-01-01T03:00")) is None
    assert until([broken, NIGHT], ams(2024, 1, 1, 3)) == ams(2024, 1, 1, 6)


# Properties: whatever the windows, the job waits to an instant that is really free.

ZONES = ["UTC", "Europe/Amsterdam", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
SCOPES = ["*", "acme/web", "/srv/site", "web", "other/x"]
START = utc("2024-01-01T00:00")
YEAR = 366 * 86_400_000
# around Amsterdam's and New York's 2024 transitions, where mistakes would hide
TRANSITIONS = [utc(t) for t in ("2024-03-10T07:00", "2024-03-31T01:00", "2024-10-27T01:00")]

hh_mm = st.builds("{:02d}:{:02d}".format, st.integers(0, 23), st.integers(0, 59))
recurring = st.builds(
    PauseWindow,
    scope=st.sampled_from(SCOPES),
    from_=hh_mm,
    to=hh_mm,
    tz=st.sampled_from(ZONES),
    days=st.lists(st.sampled_from(DAYS), unique=True, max_size=7),
)


@st.composite
def fixed(draw: st.DrawFn) -> PauseWindow:
    start = draw(st.integers(START, START + YEAR))
    length = draw(st.integers(60_000, 3 * 86_400_000))
    iso = [datetime.fromtimestamp(t / 1000, UTC).isoformat() for t in (start, start + length)]
    return PauseWindow(scope=draw(st.sampled_from(SCOPES)), start=iso[0], end=iso[1])


instants = st.one_of(
    st.integers(START, START + YEAR),
    st.builds(int.__add__, st.sampled_from(TRANSITIONS), st.integers(-86_400_000, 86_400_000)),
)
jobs = st.sampled_from([FORGE, LOCAL, Job(id="j1", kind="local", folder="/opt/x")])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(recurring, fixed()), max_size=6),
    jobs,
    st.sampled_from([None, "web"]),
    instants,
)
def test_the_returned_end_is_free(
    windows: list[PauseWindow], job: Job, project: str | None, now: int
) -> None:
    matching = [w for w in windows if applies(w, job, project)]
    found = pause_until(windows, job, project, now)
    if found is None:
        assert all(active_until(w, now) is None for w in matching)
        return
    end, window = found
    assert end > now
    assert any(active_until(w, now) is not None for w in matching)
    assert active_until(window, end - 1) == end  # the named window is the one that ends it
    if end - now < CHAIN_HORIZON_MS:
        assert all(active_until(w, end) is None for w in matching), end


def wall_covers(window: PauseWindow, t_ms: int) -> bool:
    """An independent reading of a recurring window by wall clock (exact without DST)."""
    local = datetime.fromtimestamp(t_ms / 1000, ZoneInfo(window.tz))
    minute = local.hour * 60 + local.minute
    start, end = (int(v[:2]) * 60 + int(v[3:]) for v in (window.from_ or "", window.to or ""))

    def on(day: date) -> bool:
        return not window.days or DAYS[day.weekday()] in window.days

    today, yesterday = local.date(), local.date() - timedelta(days=1)
    if start < end:
        return on(today) and start <= minute < end
    return (on(today) and minute >= start) or (on(yesterday) and minute < end)


@settings(max_examples=300, deadline=None)
@given(recurring.filter(lambda w: w.tz in ("UTC", "Asia/Kolkata")), instants)
def test_a_recurring_window_matches_its_wall_clock_reading(window: PauseWindow, now: int) -> None:
    assert (active_until(window, now) is not None) == wall_covers(window, now)


@pytest.mark.parametrize(
    ("scope", "hint"),
    [
        ("github:acme/web", 'the repo alone ("acme/web")'),
        ("gitlab:acme/web", 'the repo alone ("acme/web")'),
        ("project:web", 'the project id alone ("web")'),
        ("model:m1", "pause windows take no model scope"),
    ],
)
def test_a_prefixed_scope_that_would_match_no_job_is_refused_with_a_hint(
    scope: str, hint: str
) -> None:
    window = PauseWindow(scope=scope, from_="22:00", to="06:00")
    problems = window_problems(window)
    assert len(problems) == 1 and hint in problems[0], problems
    assert scope in problems[0]
    assert not applies(window, FORGE, "web")  # as loaded today, it pauses nothing


def test_a_project_id_with_a_colon_that_names_no_repo_is_still_a_project() -> None:
    window = PauseWindow(scope="team:web", from_="22:00", to="06:00")
    assert window_problems(window) == []
    assert applies(window, FORGE, "team:web")


# The index: windows looked up by scope, and those on "*" skipped while none can cover.


@settings(max_examples=150, deadline=None)
@given(st.one_of(recurring, fixed()), instants)
def test_no_instant_before_the_next_start_is_covered(window: PauseWindow, now: int) -> None:
    schedule = schedule_of(window)
    assert schedule is not None
    if schedule.end_covering(now) is not None:
        return
    start = schedule.next_start(now)
    assert start > now
    ahead = min(start, now + 2 * 86_400_000)
    # an occurrence lasts a minute or longer (or nothing at all, inside a DST gap)
    assert all(schedule.end_covering(t) is None for t in range(now, ahead, 60_000))
    assert schedule.end_covering(ahead - 1) is None
    if ahead == start and start < now + 86_400_000:
        assert schedule.end_covering(start) is not None or _empty_at(schedule, start)


def _empty_at(schedule: Schedule, start: int) -> bool:
    """A zero-length occurrence: from and to both inside one DST gap."""
    return isinstance(schedule, Recurring) and schedule.end_covering(start - 1) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(recurring, fixed()), max_size=8),
    jobs,
    st.sampled_from([None, "web"]),
    instants,
    st.lists(st.integers(-120, 720), min_size=4, max_size=24),  # minutes
)
@pytest.mark.anyio
async def test_one_gate_over_time_decides_as_a_fresh_reading_each_time(
    windows: list[PauseWindow], job: Job, project: str | None, start: int, steps: list[int]
) -> None:
    clock = FakeClock(start)
    gate = PauseGate(clock)
    config = ConfigSnapshot(windows=tuple(windows))
    found = Project(id=project) if project else None
    for step in steps:  # mostly on, sometimes back: the clock may be set back
        clock.advance(step * 60 + 0.25)
        now = clock.now_ms()
        decision = await gate.check(pickup_of(job, config=config, project=found))
        fresh = pause_until(windows, job, project, now)
        if fresh is None or fresh[0] - now <= MIN_DEFER_MS:
            assert decision == Admit(), now
        else:
            assert isinstance(decision, Defer) and decision.delay_ms == fresh[0] - now


@pytest.mark.anyio
async def test_a_window_on_everything_pauses_once_its_start_comes() -> None:
    clock = FakeClock(utc("2024-05-01T11:00"))
    gate = PauseGate(clock)
    windows = (
        PauseWindow(scope="*", from_="12:00", to="13:00"),
        PauseWindow(scope="*", start="2024-05-01T12:30:00+00:00", end="2024-05-01T14:00:00+00:00"),
        *(PauseWindow(scope=f"team{i}/svc", from_="00:00", to="23:00") for i in range(50)),
    )
    config = ConfigSnapshot(windows=windows)
    assert await gate.check(pickup_of(FORGE, config=config)) == Admit()
    clock.advance(3_599.5)  # 11:59:59.5: still quiet
    assert await gate.check(pickup_of(FORGE, config=config)) == Admit()
    clock.advance(0.5)  # 12:00, the first start known quiet until
    decision = await gate.check(pickup_of(FORGE, config=config))
    assert isinstance(decision, Defer) and decision.delay_ms == 2 * 3_600_000  # the chain: 14:00
    team = Job(id="j2", kind="forge", repo="Team7/svc", number=1)
    clock.advance(2 * 3_600)  # 14:00: "*" is quiet, the job's own repo window is not
    decision = await gate.check(pickup_of(team, config=config))
    assert isinstance(decision, Defer) and decision.delay_ms == 9 * 3_600_000
