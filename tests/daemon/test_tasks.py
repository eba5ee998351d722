"""Supervised and periodic loops: an exception is logged and the loop goes on; only closing
ends it. Pure asyncio, no Redis."""

from __future__ import annotations

import asyncio

import pytest

from dispatch.daemon import tasks
from dispatch.daemon.tasks import Lifecycle, OnStop, every, supervised
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio


async def test_a_loop_that_raises_is_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks, "FIRST_BACKOFF_S", 0.01)
    life, runs = Lifecycle(), []

    async def flaky() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise RuntimeError("boom")

    await asyncio.wait_for(supervised("flaky", flaky, life), 5)
    assert len(runs) == 3  # two failures, then a clean return ends it


async def test_a_supervised_loop_ends_when_the_daemon_closes() -> None:
    life = Lifecycle()

    async def always_fails() -> None:
        raise RuntimeError("boom")

    task = asyncio.create_task(supervised("bad", always_fails, life))
    await asyncio.sleep(0)
    life.close()
    await asyncio.wait_for(task, 5)  # returns, does not raise


async def test_a_failing_step_does_not_end_the_period() -> None:
    life, steps = Lifecycle(), []

    async def step() -> None:
        steps.append(1)
        raise OSError("disk full")

    task = asyncio.create_task(every("step", 0.01, step, life, at_start=True))
    await eventually(lambda: _at_least(steps, 3))
    life.close()
    await asyncio.wait_for(task, 5)


async def _at_least(items: list[int], n: int) -> bool:
    return len(items) >= n


async def test_a_loop_stopped_by_a_plain_event_runs_the_same_way() -> None:
    """The assembly's loops end with the daemon's stop signal, seen through OnStop."""
    stop, steps = asyncio.Event(), []

    async def step() -> None:
        steps.append(1)
        if len(steps) == 2:
            raise RuntimeError("boom")  # logged; the next period comes all the same

    task = asyncio.create_task(every("step", 0.01, step, OnStop(stop), jitter=False))
    await eventually(lambda: _at_least(steps, 3))
    stop.set()
    await asyncio.wait_for(task, 5)
    assert OnStop(stop).closing
