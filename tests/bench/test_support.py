"""What the benches share: the percentile rule they report by, fairness, and the call counts."""

from __future__ import annotations

import math

import pytest
from redis.asyncio import Redis

from bench.support.redis import command_calls, stats
from bench.support.stats import jain, percentile


def test_percentile_is_the_value_at_rank_q_times_n_and_nan_for_nothing() -> None:
    values = [float(v) for v in range(100, 0, -1)]
    assert percentile(values, 0.50) == 51.0
    assert percentile(values, 0.99) == 100.0
    assert percentile([3.0], 0.99) == 3.0
    assert math.isnan(percentile([], 0.5))


def test_jain_is_one_for_equal_shares_and_one_over_n_for_one_taker() -> None:
    assert jain([5, 5, 5, 5]) == 1.0
    assert jain([8, 0, 0, 0]) == 0.25
    assert jain([0, 0]) == 0.0


@pytest.mark.anyio
async def test_command_calls_count_each_command_and_leave_info_out(redis: Redis) -> None:
    before = await stats(redis)
    await redis.ping()
    used = await stats(redis) - before
    assert used.calls["ping"] >= 1  # the server may serve other clients too
    assert "info" not in used.calls and "info" not in await command_calls(redis)
