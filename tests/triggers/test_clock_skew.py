"""A host whose clock is off the server's: the minter judges by Redis's TIME, the heartbeat
publishes the offset, and `dispatch doctor` and `dispatch triggers` name the host. Real Redis,
clocks set off the server's on purpose."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from dispatch.cli.doctor.checks import fleet_checks
from dispatch.clock import FakeClock, SystemClock
from dispatch.config.settings import Settings
from dispatch.daemon.upkeep import Upkeep
from dispatch.queue import keys
from dispatch.triggers.store import TriggerStore
from tests.support.daemons import cli_env, dispatch
from tests.support.triggers import Config, beat, job_ids, minter, trigger

pytestmark = pytest.mark.anyio
AHEAD_MS = 90_000  # past the minter's downtime gap (1 minute at a 10 s period)


async def test_a_host_whose_clock_runs_ahead_cancels_nothing_not_yet_due(redis, prefix) -> None:
    now = SystemClock().now_ms()
    config = Config(trigger("minutely", "* * * * *"))
    on_time = minter(redis, prefix, FakeClock(now), config, "h1", every_s=10.0, by_server=True)
    ahead = FakeClock(now + AHEAD_MS)
    fast = minter(redis, prefix, ahead, config, "h2", every_s=10.0, by_server=True)
    for m in (on_time, fast):
        await beat(redis, prefix, m)
    await on_time.tick()
    minted = await job_ids(redis, prefix)
    assert minted, "the next occurrence is minted"
    await fast.tick()  # by its own clock, 90 s had passed since the last round: downtime
    results = await redis.hmget(keys.queue_keys("jobs", prefix).result, sorted(minted))
    assert results == [None] * len(minted), "an occurrence not yet due was cancelled"
    state = (await TriggerStore(redis, prefix).states(["minutely"], now))["minutely"]
    assert state.caught_up == "" and state.skipped == 0


async def test_the_heartbeat_publishes_this_hosts_offset_to_the_server(
    redis, prefix, tmp_path: Path
) -> None:
    settings = Settings(redis_url="", embedded=False, prefix=prefix, host="h2", state_dir=tmp_path)
    keeper = Upkeep(settings, redis, FakeClock(SystemClock().now_ms() + AHEAD_MS), lambda: 0)
    for _ in range(2):  # the first beat measures before it writes; the second, with its SET
        await keeper.beat(5.0)
        published = json.loads(await redis.get(keys.host_alive("h2", prefix)))
        assert -AHEAD_MS - 1000 < published["offset_ms"] < -AHEAD_MS + 1000


async def on_clocks(redis, prefix: str, offsets: dict[str, int]) -> None:
    for host, offset in offsets.items():
        await redis.sadd(keys.hosts_registry(prefix), host)
        payload = json.dumps({"host": host, "running": 0, "offset_ms": offset})
        await redis.set(keys.host_alive(host, prefix), payload, px=60_000)


async def test_doctor_names_a_host_whose_clock_is_off(redis, redis_url, prefix) -> None:
    settings = Settings(redis_url=redis_url, embedded=False, prefix=prefix, host="here")
    await on_clocks(redis, prefix, {"h1": 40})
    [line] = await fleet_checks(settings)
    assert line.ok and not line.warn and "2 host(s) within 2 s" in line.detail
    await on_clocks(redis, prefix, {"h2": -AHEAD_MS, "h3": 3100})
    [line] = await fleet_checks(settings)
    assert line.ok and line.warn
    named, _, hint = line.detail.partition("; ")
    assert named == "h2 90.0 s ahead of Redis, h3 3.1 s behind Redis" and "NTP" in hint


async def test_dispatch_triggers_names_a_skewed_host(
    redis, redis_url, prefix, tmp_path: Path
) -> None:
    await on_clocks(redis, prefix, {"h1": 0, "h2": -AHEAD_MS})
    config = tmp_path / "config"
    config.mkdir()
    env = cli_env(redis_url, prefix, tmp_path / "state", DISPATCH_CONFIG_DIR=str(config))
    shown = await asyncio.to_thread(dispatch, env, "triggers")
    assert shown.stdout.splitlines()[-1] == (
        "clocks: h2 90.0 s ahead of Redis (rounds are judged by Redis's TIME)"
    )
    as_json = json.loads((await asyncio.to_thread(dispatch, env, "triggers", "--json")).stdout)
    assert as_json["skewed_clocks_ms"] == {"h2": -AHEAD_MS}
