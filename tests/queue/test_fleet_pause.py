"""The fleet pause in-process on a real Redis: the client's pause and resume, and a daemon's
`follow` (before its first claim, then with every heartbeat), in the orders that can meet.
The same through real daemon processes is in tests/faults/test_pause.py."""

from __future__ import annotations

import pytest

from dispatch.client import Client
from dispatch.model import Job, encode_job
from dispatch.queue import fleet_pause, keys
from dispatch.queue.transitions import NewJob, Queue

pytestmark = pytest.mark.anyio


async def enqueue(queue: Queue, job_id: str) -> None:
    await queue.enqueue([NewJob(job_id, encode_job(Job(id=job_id, command=["true"])))])


async def copy_of(queue: Queue) -> str | None:
    raw = await queue.redis.get(queue.keys.paused)
    return raw.decode() if isinstance(raw, bytes) else raw


async def test_a_queue_first_used_after_the_pause_is_paused_before_its_first_claim(
    redis, prefix
) -> None:
    client = Client(redis, prefix, "ops")
    assert await client.pause() == ["jobs"]
    late = Queue(redis, "jobs@late", prefix)
    await enqueue(late, "j1")  # registers the queue, after the pause wrote its copies
    assert await copy_of(late) is None
    await fleet_pause.follow(redis, prefix, ["jobs", "jobs@late"])
    standing = (await client.pause_state()).fleet
    assert standing is not None and standing.by == "ops"
    assert await copy_of(late) == standing.mark
    assert (await late.claim(5, "late", 60_000)).claims == []


async def test_a_daemon_registered_before_the_pause_is_paused_by_it(redis, prefix) -> None:
    await fleet_pause.follow(redis, prefix, ["jobs", "jobs@early"])  # no pause yet
    assert await copy_of(Queue(redis, "jobs@early", prefix)) is None
    assert await Client(redis, prefix).pause() == ["jobs", "jobs@early"]
    assert (await Client(redis, prefix).pause_state()).queues == ["jobs", "jobs@early"]


async def test_a_copy_a_starting_daemon_wrote_after_the_resume_is_lifted_by_its_heartbeat(
    redis, prefix
) -> None:
    client = Client(redis, prefix)
    await client.pause()
    seen = (await client.pause_state()).fleet
    assert seen is not None
    await client.resume()
    queue = Queue(redis, "jobs@h", prefix)
    await queue.pause(seen.mark, replace=False)  # the daemon read the pause before the resume
    await redis.delete(queue.keys.marker)
    await fleet_pause.follow(redis, prefix, ["jobs@h"])
    assert await copy_of(queue) is None
    assert await redis.zscore(queue.keys.marker, "w") == 0  # its daemon is woken to claim


async def test_follow_leaves_an_older_copy_while_a_newer_pause_stands(redis, prefix) -> None:
    client = Client(redis, prefix)
    await client.pause()
    queue = Queue(redis, "jobs", prefix)
    await queue.pause("fleet:older")
    await fleet_pause.follow(redis, prefix, ["jobs"])
    assert await copy_of(queue) == "fleet:older"  # still paused: that is all a claim reads
    await client.resume()
    assert await copy_of(queue) is None


async def test_a_pause_set_by_hand_is_left_to_resume(redis, prefix) -> None:
    queue = Queue(redis, "jobs", prefix)
    await queue.pause()  # an older release's `dispatch pause`, or a tool
    await fleet_pause.follow(redis, prefix, ["jobs"])
    assert await copy_of(queue) == "1"
    assert await Client(redis, prefix).resume() == ["jobs"]
    assert await copy_of(queue) is None


async def test_a_fleet_key_set_by_hand_pauses_too(redis, prefix) -> None:
    await redis.set(keys.fleet_paused(prefix), "1")
    await fleet_pause.follow(redis, prefix, ["jobs@h"])
    assert await copy_of(Queue(redis, "jobs@h", prefix)) == "fleet:1"


async def test_views_say_whether_the_fleet_or_the_queue_is_paused(redis, prefix) -> None:
    client = Client(redis, prefix)
    await enqueue(Queue(redis, "jobs", prefix), "j1")
    await client.pause()
    view = await client.get("j1")
    assert view is not None and (view.state, view.paused) == ("waiting", "fleet")
    assert view.as_json()["paused"] == "fleet"
    await client.resume()
    await Queue(redis, "jobs", prefix).pause()
    assert [v.paused for v in await client.list()] == ["queue"]
    await client.resume()
    assert [v.paused for v in await client.list()] == [""]
    assert await client.pause_state() == fleet_pause.PauseState()
