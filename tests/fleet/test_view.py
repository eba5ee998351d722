"""The fleet snapshot on a real Redis: queue counts, waiting jobs by the reason of their defer
record (with the sample bound said), hosts live and gone, and a Redis that never answers gives
a snapshot saying so, not a hang."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest

from dispatch.fleet import view
from dispatch.model import DeferRecord, Job, RunRecord, encode_job, iso
from dispatch.queue import keys
from dispatch.queue.transitions import Finish, NewJob, Queue
from dispatch.reasons import Outcome
from tests.support.redis_errors import mute_redis

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
    assert rows["live"].jobs == [] and rows["live"].promised is None


async def test_a_beat_names_its_running_jobs_and_budget_and_junk_in_it_is_left_out(
    redis, prefix
) -> None:
    jobs = [{"id": "a", "queue": "jobs", "target": "acme/web#4", "since_ms": 5}, {"id": 7}, "x"]
    budget = {"memory": 2**30, "memory_limit": 2**33, "cpus": 1.5, "cpus_limit": 4}
    beat = {"host": "h", "running": 1, "slots": 2, "jobs": jobs, "budget": budget}
    await redis.sadd(keys.hosts_registry(prefix), "h", "odd")
    await redis.set(keys.host_alive("h", prefix), json.dumps(beat), px=60_000)
    odd = {"host": "odd", "jobs": "many", "budget": {"memory": "lots"}}
    await redis.set(keys.host_alive("odd", prefix), json.dumps(odd), px=60_000)
    rows = {h.name: h for h in (await view.snapshot(redis, prefix)).hosts}
    assert rows["h"].jobs == [view.RunningJob("a", "jobs", "acme/web#4", 5)]
    assert rows["h"].promised == view.Promised(2**30, 2**33, 1.5, 4.0)
    assert rows["odd"].jobs == [] and rows["odd"].promised is None


async def test_a_run_the_beat_names_but_its_record_says_ended_is_not_shown_running(
    redis, prefix
) -> None:
    """The beat is up to 5 s old; the record, read in the same snapshot, wins for that run."""
    seconds, _ = await redis.time()
    now = int(seconds) * 1000
    jobs = [
        {"id": "done", "queue": "jobs", "since_ms": now - 3_000},  # ended since: gone
        {"id": "again", "queue": "jobs", "since_ms": now - 1_000},  # its first run ended before
        {"id": "elsewhere", "queue": "jobs", "since_ms": now - 3_000},  # ended on another host
        {"id": "no-since", "queue": "jobs"},  # an older beat's: left as it says
    ]
    beat = {"host": "h", "running": 4, "slots": 4, "jobs": jobs}
    await redis.sadd(keys.hosts_registry(prefix), "h")
    await redis.set(keys.host_alive("h", prefix), json.dumps(beat), px=60_000)
    k = keys.queue_keys("jobs", prefix)
    for job_id, ran_on, ended in [
        ("done", "h", now - 2_000), ("again", "h", now - 2_000), ("elsewhere", "h2", now - 2_000),
        ("no-since", "h", now - 2_000),
    ]:  # fmt: skip
        record = RunRecord(
            id=job_id, attempt=1, host=ran_on, queue="jobs", outcome="completed",
            ended_at=iso(ended),
        )  # fmt: skip
        await redis.hset(k.runs, f"{job_id}#1", msgspec.json.encode(record))
        await redis.zadd(k.runs_idx, {f"{job_id}#1": ended})
    (host,) = (await view.snapshot(redis, prefix)).hosts
    assert [j.id for j in host.jobs] == ["again", "elsewhere", "no-since"]
    assert host.running == 3


async def test_the_last_hours_failures_by_reason_and_the_newest_endings(
    redis, prefix, monkeypatch: pytest.MonkeyPatch
) -> None:
    seconds, _ = await redis.time()
    now = int(seconds) * 1000
    k = keys.queue_keys("jobs", prefix)
    ends: list[tuple[str, Outcome, str, int]] = [  # id, outcome, reason, minutes ago
        ("old", "failed", "exit-1", 90), ("ok", "completed", "", 1), ("f1", "infra", "exit-3", 2),
        ("f2", "infra", "exit-3: said more", 3), ("p", "policy", "scope-cap", 4),
        ("gone", "failed", "exit-1", 5),
    ]  # fmt: skip
    for job_id, outcome, reason, ago in ends:
        at = now - ago * 60_000
        if job_id != "gone":  # indexed, its record expired
            record = RunRecord(
                id=job_id, attempt=1, host="h", queue="jobs", outcome=outcome, reason=reason,
                ended_at=iso(at),
            )  # fmt: skip
            await redis.hset(k.runs, f"{job_id}#1", msgspec.json.encode(record))
        await redis.zadd(k.runs_idx, {f"{job_id}#1": at})
    await redis.hset(k.runs, "junk#1", b"{not json")
    await redis.zadd(k.runs_idx, {"junk#1": now})
    found = await view.snapshot(redis, prefix)
    assert found.failures == {"exit-3": 2, "scope-cap": 1}
    assert [e.id for e in found.recent] == ["ok", "f1", "f2", "p"]  # newest first
    assert found.recent[2].reason == "exit-3"  # the token, never the free text
    assert (found.runs_hour, found.runs_read) == (6, 4)

    monkeypatch.setattr(view, "RECENT_SCAN", 2)
    assert (await view.snapshot(redis, prefix)).runs_read == 1  # junk and ok are newest


async def test_a_redis_that_never_answers_gives_a_snapshot_that_says_so() -> None:
    async with mute_redis() as client:
        found = await asyncio.wait_for(view.snapshot(client, "p", timeout_s=0.5), 5)
    assert found.error == "Redis did not answer within 0.5 s" and found.hosts == []
