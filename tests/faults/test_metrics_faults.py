"""The metrics leader's fleet gauges when Redis fails under it, through a real proxy in front of
a real redis-server: a refused or READONLY round leaves the gauges empty and the lead dropped,
never half a round, and the next good round fills them again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from dispatch.config.schemas import ConfigSnapshot
from dispatch.daemon.metrics import Metrics
from dispatch.errors import RedisUnavailable
from tests.support.leader import RUNS_CAP, hold_spend_read, leader_config
from tests.support.redis_proxy import RedisProxy

pytestmark = pytest.mark.anyio
FAULTS = (RedisError, RedisUnavailable, OSError)


def gauges(metrics: Metrics) -> tuple[float | None, float | None, float | None]:
    """The leader flag, the fleet's runs cap and the trigger's next instant, as scraped."""
    get = metrics.registry.get_sample_value
    return (
        get("dispatch_metrics_leader", {}),
        get("dispatch_spend_cap", RUNS_CAP),
        get("dispatch_trigger_next_timestamp_seconds", {"trigger": "nightly"}),
    )


@pytest.fixture
def config(tmp_path: Path) -> ConfigSnapshot:
    return leader_config(tmp_path)


async def test_a_readonly_round_empties_the_fleet_gauges_and_a_good_one_fills_them(
    proxy: RedisProxy, proxied: Redis, prefix: str, config: ConfigSnapshot
) -> None:
    metrics = Metrics("h1", "0.0.test")
    await metrics.fleet_step(proxied, prefix, "h1", lambda: config)
    leader, cap, next_at = gauges(metrics)
    assert (leader, cap) == (1, 5) and next_at is not None
    with proxy.fault("error"), pytest.raises(FAULTS):
        await metrics.fleet_step(proxied, prefix, "h1", lambda: config)
    assert gauges(metrics) == (0, None, None)
    await metrics.fleet_step(proxied, prefix, "h1", lambda: config)
    assert gauges(metrics)[:2] == (1, 5)


async def test_redis_gone_mid_round_shows_the_last_round_then_nothing(
    proxy: RedisProxy,
    proxied: Redis,
    prefix: str,
    config: ConfigSnapshot,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metrics = Metrics("h1", "0.0.test")
    await metrics.fleet_step(proxied, prefix, "h1", lambda: config)
    last = gauges(metrics)
    asked, answer = hold_spend_read(monkeypatch)
    step = asyncio.create_task(metrics.fleet_step(proxied, prefix, "h1", lambda: config))
    await asyncio.wait_for(asked.wait(), 10)
    assert gauges(metrics) == last  # the snapshot is read, the gauges not yet touched
    with proxy.fault("refuse"):
        answer.set()
        with pytest.raises(FAULTS):
            await step
    assert gauges(metrics) == (0, None, None)  # nothing of the fleet rather than half of it
