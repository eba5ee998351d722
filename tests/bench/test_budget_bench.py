"""The spend-cap bench runs, and every reservation is one script call."""

from __future__ import annotations

import pytest

from bench.budget import run

pytestmark = pytest.mark.anyio


async def test_one_script_call_per_reservation(redis_url: str) -> None:
    figures = await run(redis_url, concurrency=5, duration_s=0.3)
    assert figures["reservations"] > 0 and figures["counters_per_reservation"] == 12
    assert figures["redis_commands_per_reservation"] == 1.0
