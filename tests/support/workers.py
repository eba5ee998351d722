"""An in-process worker's settings and timings for tests: short locks, renewals and sweeps,
so that a lapse or a sweep happens within a test's seconds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dispatch.config.settings import Settings
from dispatch.daemon.worker import Timing

FAST = Timing(heartbeat_s=0.5, block_s=1.0, idle_claim_s=2.0)


def make_settings(redis_url: str, prefix: str, tmp_path: Path, **overrides: object) -> Settings:
    base = Settings(
        redis_url=redis_url,
        embedded=False,
        prefix=prefix,
        host="h1",
        state_dir=tmp_path / "state",
        lock_ms=3000,
        stop_grace_s=1.0,
        shutdown_grace_s=1.0,
        renew_s=0.2,
        sweep_s=0.3,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]
