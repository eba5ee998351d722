"""Claiming ahead on a real Redis: a small host whose runs are fast claims beyond its slots, yet
runs at most its slots at once; a claim that waits in vain goes back with nothing spent, a
draining daemon hands back what waits, `recover` never takes a waiting claim for a lost one,
and a waiting claim whose lock lapsed meanwhile never runs. Runs are held open with an event,
never a sleep."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable
from pathlib import Path

import pytest

from dispatch.clock import FakeClock
from dispatch.daemon.capacity import AHEAD_PER_SLOT
from dispatch.daemon.metrics import Metrics
from dispatch.queue.faults import QueueFault
from dispatch.queue.transitions import ClaimBatch
from tests.support.polling import eventually
from tests.support.small_host import enqueue, equals, small_host, states, truthy

pytestmark = pytest.mark.anyio


async def test_a_small_fast_host_claims_ahead_but_runs_only_its_slots(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    async with small_host(redis_url, prefix, tmp_path, slots=2) as host:
        claims = host.worker.capacity.claims
        assert claims == 2 * AHEAD_PER_SLOT
        host.worker.ahead.hold_s = 60.0
        ids = await enqueue(host.queue, claims)
        await host.waiting(claims - 2)  # all claimed: two run, the others wait for a slot
        assert host.runner.now == 2 and await host.in_wait() == []
        host.runner.release.set()
        await eventually(lambda: equals(host.queue.redis.zcard(host.queue.keys.done), claims))
    assert host.runner.most == 2
    assert sorted(host.runner.ran) == sorted(ids)  # each once


async def test_a_freed_slot_runs_the_claim_waiting_for_it_in_the_same_task(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """The run that frees a slot begins the longest-waiting claim in it, and its task runs
    that one next, once its own ending is handed on: no new task, no loop turn between."""
    async with small_host(redis_url, prefix, tmp_path, slots=1) as host:
        host.worker.ahead.hold_s = 60.0
        ids = await enqueue(host.queue, 3)
        await host.waiting(2)
        host.runner.release.set()
        await eventually(lambda: equals(host.queue.redis.zcard(host.queue.keys.done), 3))
    assert host.runner.ran == ids  # oldest first
    first, *rest = host.runner.tasks
    assert first is not None and all(task is first for task in rest)
    assert host.runner.began_beside == [0, 0, 0]  # each after the one before it had ended


async def test_a_claim_that_waits_in_vain_goes_back_with_nothing_spent(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """The one run outlasts the hold: the claims waiting behind it go back to the head of the
    queue, no attempt or stall counted, and the host stops claiming ahead."""
    async with small_host(redis_url, prefix, tmp_path, slots=1) as host:
        ids = await enqueue(host.queue, 4)
        await eventually(lambda: equals(_sorted(host.in_wait()), ids[1:]))  # back to wait
        assert host.runner.ran == ["j0"] and len(host.worker.ahead) == 0
        assert not host.worker.capacity.ahead
        assert await states(host.queue.redis, host.queue, ids[1:]) == {"attempts": 0, "stalls": 0}
        (running,) = host.worker.running.values()
        assert await host.queue.claims() == [(running.claim.id, running.claim.token)]
        host.runner.release.set()
        await eventually(lambda: truthy(len(host.runner.ran) == 4))
    assert host.runner.most == 1 and sorted(host.runner.ran) == ids


async def test_the_metrics_show_the_claims_held_waiting_and_handed_back(
    redis_url: str, prefix: str, tmp_path: Path, logged: io.StringIO
) -> None:
    metrics = Metrics("h", "0")
    value = metrics.registry.get_sample_value
    async with small_host(redis_url, prefix, tmp_path, slots=1, metrics=metrics) as host:
        host.worker.ahead.hold_s = 60.0
        assert value("dispatch_claims_limit") == AHEAD_PER_SLOT
        await enqueue(host.queue, 3)
        await host.waiting(2)
        assert value("dispatch_claims_waiting") == 2 and value("dispatch_running_jobs") == 1
        host.worker.ahead.hold_s = 0.0
        host.worker.ahead.expire()  # both waited in vain: back to the queue, and no more ahead
        await eventually(lambda: equals(_sorted(host.in_wait()), ["j1", "j2"]))
        await eventually(lambda: truthy(value("dispatch_claims_waiting") == 0))
        # An idle claim reserved while the host still claimed ahead may take them once more
        # and give them back at once (the next test holds that open): the counter says every
        # hand-back the log does.
        handed = handed_back(logged)
        assert len(handed) >= 2 and set(handed) == {"j1", "j2"}
        assert value("dispatch_claims_handed_back_total", {"queue": "jobs"}) == len(handed)
        assert value("dispatch_claims_limit") == 1


async def test_a_claim_reserved_while_ahead_that_lands_after_the_cool_goes_back_at_once(
    redis_url: str,
    prefix: str,
    tmp_path: Path,
    logged: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host stops claiming ahead while a claim call it reserved room for is still to be
    sent (held open with an event): that call takes the claims just handed back, and with
    its one slot busy and no claiming ahead, they go back at once, not after a hold (60 s
    here), both in one hand-back; nothing runs but the first job, nothing is spent, and the
    host holds no more than it runs."""
    metrics = Metrics("h", "0")
    value = metrics.registry.get_sample_value
    async with small_host(redis_url, prefix, tmp_path, slots=1, metrics=metrics) as host:
        host.worker.ahead.hold_s = 60.0
        ids = await enqueue(host.queue, 3)
        await host.waiting(2)
        lane = host.worker.lanes["jobs"]
        reserved, send = asyncio.Event(), asyncio.Event()
        real_claim = lane.queue.claim

        async def held_claim(count: int, host_name: str, lock_ms: int) -> ClaimBatch:
            reserved.set()
            await send.wait()
            return await real_claim(count, host_name, lock_ms)

        monkeypatch.setattr(lane.queue, "claim", held_claim)
        lane.poke()  # the pump's claim: room taken, its call held before it is sent
        await asyncio.wait_for(reserved.wait(), 5)
        host.worker.ahead.hold_s = 0.0
        host.worker.ahead.expire()
        await eventually(lambda: equals(_sorted(host.in_wait()), ["j1", "j2"]))
        host.worker.ahead.hold_s = 60.0  # a claim that waited now would wait the test out
        send.set()  # the reserved call goes now, and takes both again
        await eventually(lambda: truthy(len(handed_back(logged)) == 4))
        await eventually(lambda: equals(_sorted(host.in_wait()), ["j1", "j2"]))
        assert hand_backs(logged) == [["j1", "j2"], ["j1", "j2"]]  # the late batch in one call
        assert value("dispatch_claims_handed_back_total", {"queue": "jobs"}) == 4
        assert value("dispatch_claims_waiting") == 0 and value("dispatch_claims_limit") == 1
        assert host.runner.ran == ["j0"]
        assert await states(host.queue.redis, host.queue, ids) == {"attempts": 0, "stalls": 0}


def handed_back(logged: io.StringIO) -> list[str]:
    """Every job the log says went back unrun, once per hand-back."""
    return [j for jobs in hand_backs(logged) for j in jobs]


def hand_backs(logged: io.StringIO) -> list[list[str]]:
    """The jobs of each hand-back the log names, in order, each sorted."""
    rows = [json.loads(line) for line in logged.getvalue().splitlines() if line.startswith("{")]
    return [sorted(r["jobs"]) for r in rows if r["event"] == "waiting_claims_handed_back"]


async def test_a_draining_host_hands_back_what_waits_and_runs_none_of_it(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    async with small_host(redis_url, prefix, tmp_path, slots=1) as host:
        host.worker.ahead.hold_s = 60.0  # only the drain hands them back
        ids = await enqueue(host.queue, 5)
        await host.waiting(4)
        host.stop.set()  # the run is stopped after the shutdown grace, and handed back too
        await asyncio.wait_for(host.task, 30)
        assert set(ids[1:]) <= set(await host.in_wait())
        assert await host.queue.claims() == []
        assert host.runner.ran == ["j0"]
        assert await states(host.queue.redis, host.queue, ids) == {"attempts": 0, "stalls": 0}


async def test_recover_leaves_waiting_claims_alone(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """A lane left unsure by a failed claim call hands back the claims nobody here runs: a
    claim waiting for a slot is one this host will run, not a lost one."""
    async with small_host(redis_url, prefix, tmp_path, slots=1) as host:
        host.worker.ahead.hold_s = 60.0
        ids = await enqueue(host.queue, 3)
        await host.waiting(2)
        lane = host.worker.lanes["jobs"]
        lane.unsure = True

        async def recovered() -> bool:  # as each renewal tick does: not while a claim is sent
            await host.worker._recover()
            return not lane.unsure

        await eventually(recovered)
        assert await host.in_wait() == [] and len(host.worker.ahead) == 2
        host.runner.release.set()
        await eventually(lambda: truthy(sorted(host.runner.ran) == ids))
    assert host.runner.most == 1


async def test_a_hand_back_redis_did_not_answer_is_left_to_recover(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    async with small_host(redis_url, prefix, tmp_path, slots=1) as host:
        host.worker.ahead.hold_s = 60.0
        ids = await enqueue(host.queue, 3)
        await host.waiting(2)
        lane = host.worker.lanes["jobs"]
        real = lane.queue.hand_back

        async def cut_off(pairs: object) -> tuple[list[str], list[str]]:
            raise QueueFault("hand back: Connection reset by peer")

        lane.queue.hand_back = cut_off  # type: ignore[method-assign]
        host.worker.ahead.hold_s = 0.0
        host.worker.ahead.expire()
        await eventually(lambda: truthy(lane.unsure))
        assert await host.in_wait() == []  # still claimed: nobody here will run them
        lane.queue.hand_back = real  # type: ignore[method-assign]
        await host.worker._recover()
        assert sorted(await host.in_wait()) == sorted(set(ids) - {host.runner.ran[0]})
        host.runner.release.set()
        await eventually(lambda: truthy(sorted(host.runner.ran) == ids))


async def test_a_waiting_claim_whose_lock_lapsed_never_runs(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """Held past its lock (a frozen daemon): swept, claimed and run by another host meanwhile.
    When a slot frees here at last, the stale claim is stopped before it starts and its
    ending writes nothing over the other host's: the job runs once."""
    clock = FakeClock()
    async with small_host(redis_url, prefix, tmp_path, slots=1, clock=clock) as host:
        host.worker.ahead.hold_s = 600.0  # the daemon's own timer never fires in this test
        await enqueue(host.queue, 2)
        await host.waiting(1)
        host.worker.capacity.cool()  # no room here now: the other host takes the job
        (stale,) = host.worker.ahead.pairs()
        queue = host.queue
        await queue.redis.zadd(queue.keys.active, {stale[0]: 0})  # its lock lapsed
        assert await queue.sweep(3, b'{"reason":"stalled"}') == ([stale[0]], [])
        [other] = (await queue.claim(1, "h2", 60_000)).claims
        assert other.id == stale[0]
        clock.advance(host.worker.settings.lock_ms / 1000)  # as this host's clock sees it
        host.runner.release.set()
        await eventually(lambda: truthy(len(host.worker.ahead) == 0 and not host.worker.running))
        assert stale[0] not in host.runner.ran
        assert await queue.claims() == [(other.id, other.token)]  # the other host's, untouched


async def _sorted(ids: Awaitable[list[str]]) -> list[str]:
    return sorted(await ids)
