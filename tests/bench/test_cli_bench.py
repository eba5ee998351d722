"""The CLI bench runs its commands against a real Redis, each one exiting 0."""

from __future__ import annotations

from bench.cli import TARGETS_MS, run


def test_every_command_is_timed(redis_url: str) -> None:
    figures = run(redis_url, runs=2, warmup=0, jobs=30)
    assert set(TARGETS_MS) <= set(figures)
    for name, f in figures.items():
        assert 0 < f["min_ms"] <= f["median_ms"] <= f["max_ms"], name
    assert figures["submit"]["target_ms"] == 150.0
