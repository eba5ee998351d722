"""The config-scale bench runs at a small size: its large config is one the loader takes whole,
the daemon's gates read every row of it, and every job of both drains runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import config_scale
from dispatch.config.watcher import load_once

pytestmark = pytest.mark.anyio


def test_the_large_config_loads_whole_and_matches_none_of_the_jobs(tmp_path: Path) -> None:
    config_scale.write_large(tmp_path)
    assert config_scale.loaded_rows(tmp_path) == config_scale.SIZES
    snapshot = load_once(tmp_path)
    scopes = {row.scope for row in snapshot.limits}
    assert config_scale.REPO not in scopes and f"model:{config_scale.MODEL}" not in scopes
    assert all(config_scale.MODEL not in e.models for e in snapshot.endpoints)
    assert all(config_scale.REPO not in p.repos for p in snapshot.projects)


async def test_both_drains_run_every_job_and_the_daemon_reads_every_row(
    redis_url: str, tmp_path: Path
) -> None:
    args = config_scale.parse(["--jobs", "300", "--reps", "1", "--concurrency", "10"])
    out = await config_scale.measure(args, redis_url, tmp_path)
    (rep,) = out["reps"]
    assert rep["large"]["config_rows"] == config_scale.SIZES
    assert rep["empty"]["config_rows"] == dict.fromkeys(config_scale.SIZES, 0)
    assert rep["large"]["runs"] == rep["empty"]["runs"] == 300
    assert set(rep["large"]["active_gates"]) >= config_scale.READERS
    assert rep["slowdown"] > 0 and out["median_slowdown"] == rep["slowdown"]
    assert rep["large"]["cmds_per_job"] > 0 and rep["empty"]["cmds_per_job"] > 0
