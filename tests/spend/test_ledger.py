"""The ledger's background closing and the sweep's settle of lost runs, on a real Redis."""

from __future__ import annotations

import time

import msgspec
import pytest
from redis.asyncio import Redis

from dispatch.config.limits import zone
from dispatch.config.schemas import Overlay, ScopedLimit
from dispatch.queue.keys import queue_keys
from dispatch.spend import ledger as ledger_module
from dispatch.spend.ledger import Blocked, SpendLedger, reservation_id
from dispatch.spend.plan import Counter, Subject, counters

pytestmark = pytest.mark.anyio


def plan(ledger: SpendLedger, usd: float | None = 2) -> list[Counter]:
    rows = [msgspec.convert({"scope": "*", "day": 5, "dayUsd": 10}, ScopedLimit)]
    subject = Subject(None, None, None, None)
    now = int(time.time() * 1000)
    return counters(rows, subject, usd, Overlay(), now, zone("UTC"), ledger.keys)


async def used_held(ledger: SpendLedger, c: Counter) -> tuple[int, int]:
    used, held = await ledger.redis.hmget(c.key, "used", "held")
    return int(used or 0), int(held or 0)


async def test_a_redis_fault_at_close_is_retried_then_left_to_the_sweep(monkeypatch) -> None:
    said: list[str] = []
    monkeypatch.setattr(ledger_module, "event", lambda name, **_: said.append(name))
    dead = Redis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=0.2)
    ledger = SpendLedger(dead, "x", retry_s=(0.01, 0.01))
    ledger.close_later("jobs|j|1|h:1", ["k"], "settle", -1, 0)  # never raises
    await ledger.drain(5)
    assert said == ["budget_close_retry"] * 3 + ["budget_close_abandoned"]
    await dead.aclose()


async def test_the_sweep_settles_a_lost_claim_once_after_two_looks(redis, prefix) -> None:
    ledger = SpendLedger(redis, prefix, retry_s=())
    lock = queue_keys("jobs", prefix).lock
    found = plan(ledger)
    live = reservation_id("jobs", "live", 1, "h:1")
    lost = reservation_id("jobs", "lost", 1, "h:2")
    for rid in (live, lost):
        await ledger.reserve(rid, found, urgent=False)
    await redis.hset(lock, mapping={"live": "h:1", "lost": "h:9"})  # re-claimed since
    assert await ledger.settle_lost() == []  # first look: only suspected
    assert await ledger.settle_lost() == [lost]
    assert await ledger.settle_lost() == []
    runs, usd = found
    assert await used_held(ledger, runs) == (1, 1)  # the live one still holds its run
    assert await used_held(ledger, usd) == (2_000_000, 2_000_000)
    # the lost run's own late settle finds it closed: charged once
    assert not await ledger.close_now(lost, [c.key for c in found], "settle", 9_000_000)
    assert await used_held(ledger, usd) == (2_000_000, 2_000_000)


async def test_a_claim_seen_gone_once_and_back_is_not_settled(redis, prefix) -> None:
    ledger = SpendLedger(redis, prefix, retry_s=())
    lock = queue_keys("jobs", prefix).lock
    rid = reservation_id("jobs", "j", 1, "h:1")
    await ledger.reserve(rid, plan(ledger), urgent=False)
    assert await ledger.settle_lost() == []  # no lock yet (claim being written)
    await redis.hset(lock, "j", "h:1")
    assert await ledger.settle_lost() == []
    await redis.hdel(lock, "j")
    assert await ledger.settle_lost() == []
    assert await ledger.settle_lost() == [rid]


async def test_a_dead_hosts_own_queue_is_settled_once_its_locks_pass_their_deadline(
    redis, prefix
) -> None:
    """Nobody sweeps `jobs@<host>` of a host that died: its claims keep their locks for ever.
    A lock past its deadline is a claim gone all the same. Before, only the sweeping queue's
    reservations were looked at, and only whether the lock moved: they stayed in flight."""
    ledger = SpendLedger(redis, prefix, retry_s=())
    k = queue_keys("jobs@gone", prefix)
    stale = reservation_id("jobs@gone", "stale", 1, "gone:1")
    fresh = reservation_id("jobs@gone", "fresh", 1, "gone:2")
    for rid in (stale, fresh):
        await ledger.reserve(rid, plan(ledger), urgent=False)
    await redis.hset(k.lock, mapping={"stale": "gone:1", "fresh": "gone:2"})
    seconds, _ = await redis.time()
    await redis.zadd(k.active, {"stale": seconds * 1000 - 1, "fresh": (seconds + 600) * 1000})
    assert await ledger.settle_lost() == []
    assert await ledger.settle_lost() == [stale]


async def test_every_open_reservation_is_looked_at_page_by_page(redis, prefix, monkeypatch) -> None:
    monkeypatch.setattr(ledger_module, "LOST_BATCH", 2)
    ledger = SpendLedger(redis, prefix, retry_s=())
    lost = [reservation_id(q, f"j{n}", 1, "h:1") for q in ("jobs", "jobs@a") for n in range(2)]
    for rid in lost:  # four, at most five runs a day in the plan
        assert not isinstance(await ledger.reserve(rid, plan(ledger), urgent=False), Blocked)
    assert await ledger.settle_lost() == []
    assert await ledger.settle_lost() == sorted(lost)
    assert await redis.zcard(ledger.keys.open) == 0
