"""Catch-up, jitter, changes to the file, fleet agreement and the stall guard, each on a real
Redis with the injected clock. The clock starts a day ahead of the server's, so a minted job
waits in `delayed` as it would before its instant."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.clock import FakeClock
from dispatch.config.watcher import ConfigFiles
from dispatch.model import Result, encoder
from dispatch.queue import keys
from dispatch.reasons import INFRA, STALLED, TRIGGER_MISSED
from dispatch.triggers.spec import jitter_offset, occurrence_id
from dispatch.triggers.store import TriggerStore
from tests.support.triggers import Config, beat, job_ids, minter, trigger

pytestmark = pytest.mark.anyio
HOUR_S = 3600


def tomorrow_at(minute: int) -> int:
    """Epoch ms a day ahead of now, at `minute` past the hour."""
    hour = (int(time.time()) // HOUR_S + 24) * HOUR_S
    return (hour + minute * 60) * 1000


def at(clock: FakeClock, hours: float) -> int:
    """The top of the hour `hours` after the clock's hour."""
    return (clock.now_ms() // 3_600_000 + int(hours)) * 3_600_000


async def result_of(redis, prefix: str, job_id: str) -> dict | None:
    raw = await redis.hget(keys.queue_keys("jobs", prefix).result, job_id)
    return json.loads(raw) if raw else None


async def test_catchup_skip_after_a_3h_gap_cancels_the_missed_and_mints_the_next(
    redis, prefix
) -> None:
    clock = FakeClock(tomorrow_at(10))
    m = minter(redis, prefix, clock, Config(trigger("hourly", "0 * * * *")))
    await m.tick()
    first = occurrence_id("hourly", at(clock, 1))
    assert await job_ids(redis, prefix) == {first}
    clock.advance(3 * HOUR_S)  # no round for 3 h: downtime
    await m.tick()
    assert (await result_of(redis, prefix, first) or {})["reason"] == TRIGGER_MISSED
    assert await job_ids(redis, prefix) == {first, occurrence_id("hourly", at(clock, 1))}
    state = (await TriggerStore(redis, prefix).states(["hourly"], clock.now_ms()))["hourly"]
    assert state.skipped == 3


@pytest.mark.parametrize("window,runs", [("1h", True), ("5m", False)])
async def test_catchup_latest_runs_the_most_recent_missed_once(redis, prefix, window, runs):
    clock = FakeClock(tomorrow_at(10))
    t = trigger("hourly", "0 * * * *", catchup="latest", catchup_window=window)
    m = minter(redis, prefix, clock, Config(t))
    await m.tick()
    first = occurrence_id("hourly", at(clock, 1))
    clock.advance(3 * HOUR_S)
    await m.tick()
    latest = occurrence_id("hourly", at(clock, 0))
    made = await job_ids(redis, prefix)
    assert (latest in made) is runs  # 10 minutes late: inside 1h, outside 5m
    assert occurrence_id("hourly", at(clock, -1)) not in made  # never more than one
    assert (await result_of(redis, prefix, first) or {})["reason"] == TRIGGER_MISSED
    if runs:
        assert await result_of(redis, prefix, latest) is None  # waits to run
    await m.tick()  # the next round is no catch-up: nothing more
    assert len(await job_ids(redis, prefix)) == len(made)


@given(tid=st.from_regex(r"[a-z0-9][a-z0-9._-]{0,30}", fullmatch=True), bound=st.integers(0, 10**8))
def test_jitter_is_fixed_per_trigger_and_within_its_bound(tid: str, bound: int) -> None:
    offset = jitter_offset(tid, bound)
    assert 0 <= offset <= bound
    assert jitter_offset(tid, bound) == offset


async def test_a_minted_job_is_due_at_its_instant_plus_the_jitter(redis, prefix) -> None:
    clock = FakeClock(tomorrow_at(10))
    m = minter(redis, prefix, clock, Config(trigger("j", "0 * * * *", jitter="2m")))
    await m.tick()
    job = occurrence_id("j", at(clock, 1))
    due = await redis.zscore(keys.queue_keys("jobs", prefix).delayed, job)
    offset = jitter_offset("j", 120_000)
    assert due == at(clock, 1) + offset and 0 <= offset <= 120_000


async def test_a_changed_schedule_drops_its_pending_and_leaves_the_others(redis, prefix) -> None:
    clock = FakeClock(tomorrow_at(10))
    config = Config(trigger("a", "0 * * * *"), trigger("b", "0 * * * *"))
    m = minter(redis, prefix, clock, config)
    await m.tick()
    b_job = occurrence_id("b", at(clock, 1))
    queued = keys.queue_keys("jobs", prefix).queued
    b_queued = await redis.hget(queued, b_job)
    config.set(trigger("a", "30 * * * *"), trigger("b", "0 * * * *"))
    clock.advance(60)
    await m.tick()
    a_new = occurrence_id("a", at(clock, 0) + 30 * 60_000)
    assert await job_ids(redis, prefix) == {a_new, b_job}
    assert await redis.hget(queued, b_job) == b_queued  # untouched
    # the same instant with another document: withdrawn and minted again, same id
    config.set(
        trigger("a", "30 * * * *", job={"command": ["echo", "new"]}), trigger("b", "0 * * * *")
    )
    await m.tick()
    data = await redis.hget(keys.queue_keys("jobs", prefix).data, a_new)
    assert json.loads(data)["command"] == ["echo", "new"]


async def test_a_removed_or_disabled_trigger_loses_its_pending_occurrence(redis, prefix) -> None:
    clock = FakeClock(tomorrow_at(10))
    config = Config(trigger("gone", "0 * * * *"), trigger("off", "0 * * * *"))
    m = minter(redis, prefix, clock, config)
    await m.tick()
    assert len(await job_ids(redis, prefix)) == 2
    config.set(trigger("off", "0 * * * *", enabled=False))
    await m.tick()
    assert await job_ids(redis, prefix) == set()
    assert await redis.smembers(keys.triggers_registry(prefix)) == {b"off"}


async def test_a_broken_file_keeps_the_last_good_triggers(redis, prefix, tmp_path: Path) -> None:
    clock = FakeClock(tomorrow_at(10))
    path = tmp_path / "triggers.json"
    good = {
        "version": 1,
        "triggers": [{"id": "t", "cron": "0 * * * *", "job": {"command": ["true"]}}],
    }
    path.write_text(json.dumps(good))
    files = ConfigFiles(tmp_path, clock, check_every_s=0)
    m = minter(redis, prefix, clock, Config())
    m.config = files.current
    await m.tick()
    made = await job_ids(redis, prefix)
    broken = {"version": 1, "triggers": [{"id": "t", "cron": "0 25 * * *", "job": {}}]}
    path.write_text(json.dumps(broken))
    clock.advance(1)
    assert "triggers.json" in files.current().errors
    await m.tick()
    assert await job_ids(redis, prefix) == made and len(made) == 1


async def test_two_hosts_that_disagree_mint_nothing_until_they_agree(redis, prefix) -> None:
    clock = FakeClock(tomorrow_at(10))
    a = minter(redis, prefix, clock, Config(trigger("t", "0 * * * *")), host="a")
    b_config = Config(trigger("t", "0 * * * *", tz="Europe/Amsterdam"))
    b = minter(redis, prefix, clock, b_config, host="b")
    await beat(redis, prefix, a)
    await beat(redis, prefix, b)
    await a.tick()
    await b.tick()
    assert await job_ids(redis, prefix) == set()
    assert a.agreement is not None and a.agreement.differing == {"b": b.fingerprint()}
    b_config.set(trigger("t", "0 * * * *"))
    await beat(redis, prefix, b)
    await a.tick()
    assert len(await job_ids(redis, prefix)) == 1


async def test_the_stall_guard_disables_a_trigger_after_n_infra_failures(redis, prefix) -> None:
    clock = FakeClock(tomorrow_at(10))
    m = minter(redis, prefix, clock, Config(trigger("s", "*/10 * * * *")), every_s=300)
    q = keys.queue_keys("jobs", prefix)
    failed = encoder.encode(Result(state="failed", outcome=INFRA, reason=STALLED))
    for _ in range(3):
        await m.tick()
        clock.advance(600)
        for job_id in await job_ids(redis, prefix):  # every job so far ends stalled
            await redis.hset(q.result, job_id, failed)
    await m.tick()
    state = (await m.store.states(["s"], clock.now_ms()))["s"]
    assert "3 infrastructure failures in a row" in state.disabled
    assert state.future == []  # its pending occurrence was withdrawn
