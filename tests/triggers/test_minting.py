"""Minting on a real Redis with the injected clock: three minters racing through DST seasons
make exactly one job per occurrence, at every instant the schedule has and none twice."""

from __future__ import annotations

import asyncio

import pytest

from dispatch.clock import FakeClock
from dispatch.queue import keys
from dispatch.triggers.schedule import Schedule
from dispatch.triggers.spec import occurrence_id
from tests.support.triggers import Config, job_ids, minter, ms, trigger

pytestmark = pytest.mark.anyio

AMS, NY = "Europe/Amsterdam", "America/New_York"
TRIGGERS = [
    trigger("ams-nightly", "30 2 * * *", tz=AMS),
    trigger("ams-halfhour", "*/30 1-3 * * *", tz=AMS),
    trigger("ny-hourly", "0 * * * *", tz=NY),
    trigger("ny-early", "15 1,2 * * *", tz=NY),
]
SEASONS = {  # both spring changes in one run, both fall changes in the other
    "spring": ("2025-03-07T00:00", "2025-04-01T00:00"),
    "fall": ("2025-10-24T00:00", "2025-11-04T00:00"),
}


def expected(start: int, end: int) -> set[str]:
    out = set()
    for t in TRIGGERS:
        s, at = Schedule.of(t.cron, t.tz), start
        while (at := s.next_after(at)) <= end:
            out.add(occurrence_id(t.id, at))
    return out


@pytest.mark.parametrize("season", SEASONS)
async def test_three_racing_minters_make_one_job_per_occurrence(redis, prefix, season) -> None:
    start, end = (ms(x) for x in SEASONS[season])
    clock = FakeClock(start)
    config = Config(*TRIGGERS)
    # a round every hour mints three hours ahead; the clock moves 50 minutes between rounds
    minters = [minter(redis, prefix, clock, config, f"h{n}", every_s=3600) for n in range(3)]
    while clock.now_ms() <= end:
        await asyncio.gather(*(m.tick() for m in minters))
        clock.advance(50 * 60)
    want = expected(start, end)
    made = await job_ids(redis, prefix)
    assert len(want) >= 200
    assert want <= made  # every occurrence, the DST nights' included
    beyond = made - want  # minted ahead past the end (3 h, or each trigger's next one)
    assert beyond <= expected(end, end + 86_400_000)
    # none twice: each occurrence is one id, and no other job was made
    dedups = await redis.hkeys(keys.queue_keys("jobs", prefix).dedup)
    assert len(dedups) == len(made)
