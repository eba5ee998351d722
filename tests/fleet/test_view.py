"""The fleet snapshot on a real Redis: queue counts, waiting jobs by the reason of their defer
record (with the sample bound said), hosts live and gone, and a Redis that never answers gives
a snapshot saying so, not a hang."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest
from redis.asyncio import Redis

from dispatch.fleet import view
from dispatch.model import DeferRecord, Job, encode_job
from dispatch.queue import keys
from dispatch.queue.transitions import Finish, NewJob, Queue

pytestmark = pytest.mark.anyio


async def deferred(q: Queue, reasons: list[str]) -> None:
    jobs = [
        NewJob(f"j{i}", encode_job(Job(id=f"j{i}", command=["x"]))) for i in range(len(reasons))
    ]
    await q.enqueue(jobs)
    batch = await q.claim(len(reasons), "h1", 60_000)
    by_id = {c.id: c for c in batch.claims}
    ends = []
    for i, reason in enumerate(reasons):
        record = DeferRecord(reason=reason, until="", at="")
        ends.append(
            Finish("defer", f"j{i}", by_id[f"j{i}"].token, msgspec.json.encode(record), 60_000)
        )
    assert all(await q.finish(ends))


async def test_waiting_jobs_are_counted_by_reason_and_the_sample_is_said(
    redis, prefix, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = Queue(redis, "jobs", prefix)
    await deferred(q, ["scope-repo", "scope-repo", "pause-window", "scope-repo"])
    await q.enqueue([NewJob("ready", encode_job(Job(id="ready", command=["x"])))])
    found = await view.snapshot(redis, prefix)
    assert found.error == ""
    [row] = found.queues
    assert (row.name, row.ready, row.delayed, row.active) == ("jobs", 1, 4, 0)
    assert {r: w.count for r, w in found.reasons.items()} == {"scope-repo": 3, "pause-window": 1}
    assert list(found.reasons) == ["scope-repo", "pause-window"]  # most first
    assert all(w.oldest_ms and w.oldest_ms <= found.at_ms for w in found.reasons.values())

    monkeypatch.setattr(view, "SAMPLE", 2)
    bounded = await view.snapshot(redis, prefix)
    assert bounded.sampled == 2 and sum(w.count for w in bounded.reasons.values()) == 2


async def test_hosts_live_and_gone_and_long_gone(redis, prefix) -> None:
    seconds, _ = await redis.time()
    now = int(seconds) * 1000
    await redis.sadd(keys.hosts_registry(prefix), "live", "quiet", "ancient")
    await redis.hset(
        keys.hosts_seen(prefix),
        mapping={"live": now, "quiet": now - 90_000, "ancient": now - view.GONE_AFTER_MS - 1},
    )
    beat = {"host": "live", "running": 3, "slots": 8, "version": "0.1.0", "triggers": "ab"}
    await redis.set(keys.host_alive("live", prefix), json.dumps(beat), px=60_000)
    found = await view.snapshot(redis, prefix)
    rows = {h.name: h for h in found.hosts}
    assert set(rows) == {"live", "quiet"}  # a host silent for over a week is no longer listed
    assert rows["live"].alive and (rows["live"].running, rows["live"].slots) == (3, 8)
    assert rows["live"].mints and not rows["quiet"].alive
    assert view.age(found.at_ms, rows["quiet"].last_beat_ms) == "1m"


async def test_a_redis_that_never_answers_gives_a_snapshot_that_says_so() -> None:
    held: list[asyncio.StreamWriter] = []

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # takes the commands, answers nothing

    server = await asyncio.start_server(mute, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = Redis.from_url(f"redis://127.0.0.1:{port}/0")
    try:
        found = await asyncio.wait_for(view.snapshot(client, "p", timeout_s=0.5), 5)
    finally:
        await client.aclose()
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    assert found.error == "Redis did not answer within 0.5 s" and found.hosts == []
