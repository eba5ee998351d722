"""The jobs-listing bench runs every page at two sizes and reports what each looked at."""

from __future__ import annotations

import uuid

import pytest

from bench.web_jobs import run

pytestmark = pytest.mark.anyio


async def test_the_listing_bench_reads_every_page(redis_url: str) -> None:
    figures = await run(redis_url, [300, 600], reps=2, prefix=f"bj{uuid.uuid4().hex[:8]}")
    small = figures["sizes"]["300"]
    assert small["first"]["rows"] == 50 and small["no_match"]["rows"] == 0
    assert small["no_match"]["looked"] == 300  # every job, under the SCAN bound
    assert figures["sizes"]["600"]["reason"]["rows"] == 50
    assert set(figures["large_over_small_p50"]) == {"first", "deep", "reason", "no_match"}
