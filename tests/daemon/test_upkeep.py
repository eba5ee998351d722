"""Upkeep's output pruning, on the injected clock: weeks pass in milliseconds."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from redis.asyncio import Redis

from dispatch.clock import FakeClock
from dispatch.config.settings import Settings
from dispatch.daemon.upkeep import Upkeep
from dispatch.queue.transitions import Claim

pytestmark = pytest.mark.anyio

DAY_S = 86_400


def claim(job_id: str, attempt: int, token: str) -> Claim:
    return Claim("jobs", job_id, token, attempt, 0, 0, b"")


def aged(path: Path, clock: FakeClock, days: float) -> Path:
    """A file last written `days` before the clock's now."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("out\n")
    at_ns = (clock.now_ms() - int(days * DAY_S * 1000)) * 1_000_000
    os.utime(path, ns=(at_ns, at_ns))
    return path


def upkeep(redis: Redis, tmp_path: Path, clock: FakeClock, claims: list[Claim]) -> Upkeep:
    settings = Settings(redis_url="", embedded=False, state_dir=tmp_path, host="h1")
    return Upkeep(settings, redis, clock, lambda: len(claims), lambda: claims)


async def test_output_past_the_retention_goes_newer_and_live_output_stays(
    redis: Redis, tmp_path: Path, logged: io.StringIO
) -> None:
    clock = FakeClock()
    out = tmp_path / "output"
    old = aged(out / "old.1.3.log", clock, 15)
    older_name = aged(out / "older.2.log", clock, 20)
    recent = aged(out / "recent.1.4.log", clock, 13)
    quiet = aged(out / "quiet.2.5.log", clock, 30)  # its run is live: it printed nothing for long
    keeper = upkeep(redis, tmp_path, clock, [claim("quiet", 2, "h1:5")])
    await keeper.prune_output()
    assert not old.exists() and not older_name.exists()
    assert recent.exists() and quiet.exists()
    assert '"event":"output_pruned","files":2' in logged.getvalue()
    clock.advance(2 * DAY_S)  # recent is now 15 days old
    await keeper.prune_output()
    assert not recent.exists() and quiet.exists()


async def test_a_retention_set_short_is_followed(redis: Redis, tmp_path: Path) -> None:
    clock = FakeClock()
    hour_old = aged(tmp_path / "output" / "a.1.1.log", clock, 1 / 24)
    settings = Settings(redis_url="", embedded=False, state_dir=tmp_path, output_retention_s=1800)
    await Upkeep(settings, redis, clock, lambda: 0).prune_output()
    assert not hour_old.exists()


async def test_a_prune_that_fails_is_logged_and_upkeep_goes_on(
    redis: Redis, tmp_path: Path, logged: io.StringIO
) -> None:
    (tmp_path / "output").write_text("a file where the folder should be")  # ENOTDIR
    clock = FakeClock()
    keeper = upkeep(redis, tmp_path, clock, [])
    await keeper.prune_output()  # does not raise
    assert '"event":"output_prune_failed","files":1' in logged.getvalue()
    (tmp_path / "output").unlink()
    stale = aged(tmp_path / "output" / "a.1.1.log", clock, 15)
    await keeper.prune_output()  # the next period works again
    assert not stale.exists()
