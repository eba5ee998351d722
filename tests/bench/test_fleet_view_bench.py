"""The fleet-snapshot bench runs, reads every host and samples the delayed jobs' reasons."""

from __future__ import annotations

import uuid

import pytest

from bench.fleet_view import run

pytestmark = pytest.mark.anyio


async def test_the_snapshot_bench_reads_the_whole_fleet(redis_url: str) -> None:
    figures = await run(redis_url, jobs=3000, hosts=5, reps=3, prefix=f"bv{uuid.uuid4().hex[:8]}")
    assert figures["live_hosts_seen"] == 5
    assert figures["reasons_sampled_from"] == 1800  # 60% delayed, all under the sample bound
    assert figures["snapshot_p50_ms"] > 0
