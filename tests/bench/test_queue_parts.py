"""bench.queue's gated daemon with parts taken off (`--without` of bench.instructions), on a
real Redis and real daemon processes: what a part leaves behind is there with it and gone
without it, the run records land on disk either way, and a part the processor does not have
is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from bench.queue import PARTS, Fleet, drained, enqueue, gate_names, plain_jobs, take_off
from dispatch.queue.transitions import Queue

pytestmark = pytest.mark.anyio


async def _drain(redis: Redis, url: str, prefix: str, tmp: Path, without: tuple[str, ...]) -> Any:
    fleet = Fleet(url, prefix, 1, 5, tmp, True, without=without)
    await fleet.start(redis, settle_s=0, within_s=60)
    await enqueue(Queue(redis, "jobs", prefix), plain_jobs(20), 500)
    await drained(Queue(redis, "jobs", prefix), timeout_s=60)
    [row] = await asyncio.get_running_loop().run_in_executor(None, fleet.stop)
    assert len(row["ids"]) == 20
    return row, fleet.specs[0].state_dir


@pytest.mark.timeout(120)
async def test_the_gated_daemon_runs_without_the_parts_taken_off(
    redis: Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    whole, whole_dir = await _drain(redis, redis_url, prefix + "a", tmp_path, ())
    assert whole["active_gates"]
    assert list((whole_dir / "usage").glob("slot-*"))

    less, less_dir = await _drain(redis, redis_url, prefix + "b", tmp_path, tuple(PARTS))
    assert less["active_gates"] == []
    assert not list((less_dir / "usage").glob("slot-*"))
    for state_dir in (whole_dir, less_dir):  # without `log`, the finish writes them
        assert len((state_dir / "runs.jsonl").read_text().splitlines()) == 20


@pytest.mark.timeout(120)
async def test_one_gate_taken_off_is_the_one_gone(
    redis: Redis, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    whole, _ = await _drain(redis, redis_url, prefix + "a", tmp_path, ())
    less, _ = await _drain(redis, redis_url, prefix + "b", tmp_path, ("gate:size",))
    assert "size" in whole["active_gates"]
    assert less["active_gates"] == [name for name in whole["active_gates"] if name != "size"]


@pytest.mark.parametrize("part", ["spend", "gate:sizes", "gate:"])
def test_a_part_the_processor_lacks_is_refused(part: str) -> None:
    with pytest.raises(ValueError, match=f"no part '{part}'"):
        take_off(object(), (part,))  # type: ignore[arg-type]
    assert set(PARTS) == {"gates", "usage", "tails", "log"}
    assert {"size", "host-slot", "spend"} <= gate_names()
