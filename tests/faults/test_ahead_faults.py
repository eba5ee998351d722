"""A small host that claims ahead (daemon/ahead.py) meets Redis answering READONLY, or refusing
connections, while claims wait for its slots: the hand-back of those that wait in vain fails,
the lane is left unsure and hands them back once Redis is back, and every job still completes,
once, with the daemon alive. Real redis-server behind `RedisProxy`, a real daemon process:
`bench/support/ahead_worker.py`, the worker that claims ahead whatever its runs take (a
process run here outlasts the 25 ms under which a host claims ahead).

Timing, not sleeps for a state: a claim waits HOLD (2 s) at most. The host claims ahead once its
first run ends; the two jobs that then take its 2 slots run LONG_S (5 s), so no slot frees while
the fault (3 s, begun once a claim is seen waiting) is on, and every claim waiting then is
handed back, in vain, before it ends. The others run RUN_S (0.6 s). Claims were seen waiting
before the fault with a short run in each slot, and the fault then missed the hand-back once
in CI: runs ending during it let the waiting claims begin."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from dispatch.model import Job, encode_job, instant_ms
from dispatch.queue.transitions import ClaimBatch, NewJob, Queue
from tests.faults.conftest import Events
from tests.support.daemons import cli_env, daemon, log_path
from tests.support.metrics import scrape_if_up
from tests.support.polling import eventually, eventually_sync
from tests.support.redis_errors import ERROR_REPLIES
from tests.support.redis_proxy import RedisProxy
from tests.support.redis_server import free_port
from tests.support.small_host import enqueue, small_host, states, text, truthy

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

JOBS = 24
RUN_S = 0.6
LONG = ("a0002", "a0003")  # the first claimed once the host claims ahead: they hold both slots
LONG_S = 5.0
HOLD = "2"
FAULT_S = 3.0
AHEAD_WORKER = (sys.executable, "-m", "bench.support.ahead_worker")


def completions(state: Path) -> Counter[str]:
    log = state / "runs.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return Counter(r["id"] for r in map(json.loads, lines) if r.get("outcome") == "completed")


def claims_waiting(port: int) -> bool:
    return scrape_if_up(port).get(("dispatch_claims_waiting", ()), 0) > 0


@pytest.mark.parametrize("mode", ["error", "refuse"])
async def test_waiting_claims_ride_out_redis_faults_with_every_job_run_once(
    redis: Redis, prefix: str, tmp_path: Path, proxy, mode: str
) -> None:
    port = free_port()
    state = tmp_path / "state"
    env = cli_env(
        proxy.url, prefix, state, DISPATCH_HOST="ahead", DISPATCH_CONCURRENCY="2",
        DISPATCH_METRICS_ADDR=f"127.0.0.1:{port}", BENCH_AHEAD_HOLD_S=HOLD,
    )  # fmt: skip
    queue = Queue(redis, "jobs", prefix)
    ids = [f"a{i:04d}" for i in range(JOBS)]
    await queue.enqueue(
        [NewJob(i, encode_job(Job(id=i, command=["sleep", str(_run_s(i))]))) for i in ids]
    )
    error = ERROR_REPLIES["READONLY"] if mode == "error" else b""
    with daemon(env, program=AHEAD_WORKER) as proc:
        await anyio.to_thread.run_sync(lambda: eventually_sync(lambda: claims_waiting(port), 30))
        with proxy.fault(mode, error):
            await anyio.sleep(FAULT_S)  # the fault's length is the point, not a wait for a state
        assert proc.poll() is None
        await eventually(lambda: _done_at_least(redis, queue, JOBS), timeout=90)
        assert proc.poll() is None
    ran = completions(state)
    assert sorted(ran) == ids and set(ran.values()) == {1}  # each ran, and ran once
    assert await redis.hlen(queue.keys.stalls) == 0  # handed back by recover, none left to lapse
    logged = [json.loads(line) for line in log_path(env).read_text().splitlines()]
    met = {e.get("during") for e in logged if e.get("event") == "redis_error"}
    assert "hand_back" in met  # the fault did meet a hand-back of waiting claims
    assert [e for e in logged if e.get("event") == "waiting_claims_handed_back"]
    assert not [e for e in logged if e.get("event") in ("task_failed", "job_crashed")]


@pytest.mark.parametrize("mode", ["error", "refuse"])
async def test_slots_handed_on_while_redis_is_away_run_every_job_once(
    redis: Redis, prefix: str, tmp_path: Path, proxy, mode: str
) -> None:
    """Short runs end during the fault: each freed slot begins a waiting claim in the same
    task (worker.py `_run`) while the finishes before it cannot reach Redis. Every job still
    completes once, and some run began inside the fault, so a hand-on did meet it."""
    port = free_port()
    state = tmp_path / "state"
    env = cli_env(
        proxy.url, prefix, state, DISPATCH_HOST="ahead", DISPATCH_CONCURRENCY="2",
        DISPATCH_METRICS_ADDR=f"127.0.0.1:{port}", BENCH_AHEAD_HOLD_S="10",
    )  # fmt: skip
    queue = Queue(redis, "jobs", prefix)
    ids = [f"s{i:04d}" for i in range(JOBS)]
    await queue.enqueue([NewJob(i, encode_job(Job(id=i, command=["sleep", "0.3"]))) for i in ids])
    error = ERROR_REPLIES["READONLY"] if mode == "error" else b""
    with daemon(env, program=AHEAD_WORKER) as proc:
        await anyio.to_thread.run_sync(lambda: eventually_sync(lambda: claims_waiting(port), 30))
        began_ms = time.time() * 1000
        with proxy.fault(mode, error):
            await anyio.sleep(FAULT_S)  # the fault's length is the point, not a wait for a state
        ended_ms = time.time() * 1000
        await eventually(lambda: _done_at_least(redis, queue, JOBS), timeout=90)
        assert proc.poll() is None
    ran = completions(state)
    assert sorted(ran) == ids and set(ran.values()) == {1}  # each ran, and ran once
    records = [json.loads(line) for line in (state / "runs.jsonl").read_text().splitlines()]
    starts = [instant_ms(r["started_at"]) or 0 for r in records if r.get("started_at")]
    assert any(began_ms < at < ended_ms for at in starts)  # begun from a slot in the fault


def _run_s(job_id: str) -> float:
    return LONG_S if job_id in LONG else RUN_S


async def _done_at_least(redis: Redis, queue: Queue, n: int) -> bool:
    return await redis.zcard(queue.keys.done) >= n


async def test_a_late_claim_given_back_while_redis_answers_readonly_goes_back_once_it_answers(
    redis: Redis,
    prefix: str,
    tmp_path: Path,
    proxy: RedisProxy,
    events: Events,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A claim call reserved while the host claimed ahead lands after it stopped, every slot
    busy: its claims go back at once, and that hand-back meets READONLY (each call held open
    with an event, the fault real). The lane is left unsure, and `recover` hands them back
    once Redis answers: nothing but the first job runs, no attempt or stall is counted."""
    async with small_host(proxy.url, prefix, tmp_path, slots=1) as host:
        host.worker.ahead.hold_s = 60.0
        ids = await enqueue(host.queue, 3)
        await host.waiting(2)
        lane = host.worker.lanes["jobs"]
        real_claim, real_hand_back = lane.queue.claim, lane.queue.hand_back
        reserved, send, handing, hand = (asyncio.Event() for _ in range(4))

        async def held_claim(count: int, host_name: str, lock_ms: int) -> ClaimBatch:
            reserved.set()
            await send.wait()
            return await real_claim(count, host_name, lock_ms)

        async def held_hand_back(pairs: Sequence[tuple[str, str]]) -> tuple[list[str], list[str]]:
            handing.set()
            await hand.wait()
            return await real_hand_back(pairs)

        monkeypatch.setattr(lane.queue, "claim", held_claim)
        lane.poke()
        await asyncio.wait_for(reserved.wait(), 5)
        host.worker.ahead.hold_s = 0.0
        host.worker.ahead.expire()  # the first hand-back, Redis answering
        await eventually(lambda: _in_wait(redis, host.queue, ["j1", "j2"]))
        host.worker.ahead.hold_s = 60.0  # a claim that waited would wait the test out
        monkeypatch.setattr(lane.queue, "hand_back", held_hand_back)
        send.set()  # the late call takes j1 and j2 again, and gives them back at once
        await asyncio.wait_for(handing.wait(), 5)
        with proxy.fault("error", ERROR_REPLIES["READONLY"]):
            hand.set()
            await eventually(lambda: truthy(_met(events, "hand_back")))
        await eventually(lambda: _in_wait(redis, host.queue, ["j1", "j2"]), timeout=10)
        assert events("lost_claims_handed_back")  # by recover, not by a hold's expiry
        assert host.runner.ran == ["j0"]
        assert await states(redis, host.queue, ids) == {"attempts": 0, "stalls": 0}


async def _in_wait(redis: Redis, queue: Queue, expected: list[str]) -> bool:
    found = await redis.lrange(queue.keys.wait, 0, -1)
    return sorted(map(text, found)) == expected


def _met(events: Events, during: str) -> list[dict[str, object]]:
    return [e for e in events("redis_error") if e.get("during") == during]
