"""The scale bench runs end to end at small sizes, and its figures mean what they say: a
claim-and-finish of a cohort is about one command per job, a queued no-op job costs Redis well
under a kilobyte, kept records are all kept, and the cluster phase drains every job."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bench import scale

pytestmark = pytest.mark.anyio


def _args(**given: object) -> argparse.Namespace:
    base = {"sample": 300, "batch": 500, "kept": 900, "idle_s": 1.0, "drain": 600}
    return argparse.Namespace(**{**base, **given})


async def test_a_size_row_and_a_kept_row(redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    try:
        row = await scale.size_row(redis, 2_000, _args())
        kept = await scale.kept_row(redis, _args())
    finally:
        await redis.aclose()
    assert row["queued"] == 2_000 and 0 < row["redis_bytes_per_queued_job"] < 1_024
    assert 0.5 < row["redis_cmds_per_job"] < 1.5 and row["snapshot_p50_ms"] > 0
    assert kept["kept"] == 900 and kept["redis_bytes_per_kept_job"] > 0


async def test_the_cluster_phase_drains_on_one_and_on_three(redis_url: str, tmp_path: Path) -> None:
    row = await scale.cluster_row(redis_url, _args(), tmp_path)
    assert row["one_daemon_one_redis_per_s"] > 0 and row["three_daemons_three_primaries_per_s"] > 0
