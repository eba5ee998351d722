"""Job timeouts on the wheel: a run's signal is aborted `job-timeout` no earlier than its
deadline and at most a tick later; a disarmed run is left alone."""

from __future__ import annotations

import asyncio

import pytest

from dispatch.daemon.timeouts import Timeouts
from dispatch.reasons import JOB_TIMEOUT
from dispatch.runners.base import AbortSignal

pytestmark = pytest.mark.anyio


async def test_an_armed_run_is_aborted_at_its_deadline_never_before() -> None:
    loop, timeouts, signal = asyncio.get_running_loop(), Timeouts(tick_s=0.05), AbortSignal()
    armed_at = loop.time()
    timeouts.arm(0.12, signal)
    await asyncio.wait_for(signal.event.wait(), 2)
    waited = loop.time() - armed_at
    assert signal.reason == JOB_TIMEOUT
    assert 0.12 - 0.002 <= waited < 0.12 + 0.05 + 0.5  # the loop's timers round to a millisecond
    assert len(timeouts) == 0


async def test_a_disarmed_run_is_never_aborted() -> None:
    timeouts, ended, going = Timeouts(tick_s=0.02), AbortSignal(), AbortSignal()
    ticket = timeouts.arm(0.05, ended)
    timeouts.arm(0.05, going)  # same tick: its timer must still fire for the one left
    timeouts.disarm(ticket, ended)
    assert len(timeouts) == 1
    await asyncio.wait_for(going.event.wait(), 2)
    assert going.reason == JOB_TIMEOUT and not ended.is_set


async def test_runs_of_one_tick_share_one_loop_timer() -> None:
    loop, timeouts = asyncio.get_running_loop(), Timeouts(tick_s=60.0)
    before = len(getattr(loop, "_scheduled", ())) if hasattr(loop, "_scheduled") else None
    tickets = {timeouts.arm(600.0, AbortSignal()) for _ in range(100)}
    assert len(tickets) <= 2  # a hundred runs armed within a tick of each other
    if before is not None:  # asyncio's own loop lists its timers; uvloop keeps them in C
        assert len(loop._scheduled) - before <= 2  # type: ignore[attr-defined]
