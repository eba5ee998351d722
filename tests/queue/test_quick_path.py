"""`dispatch submit` and `dispatch jobs` go through cli/quick.py (a blocking socket, no
redis-py): what they write and what they list is what `Client` writes and lists, job for job,
on one server and, through the quick path's fallback, on a cluster."""

from __future__ import annotations

from functools import partial
from urllib.parse import urlsplit

import msgspec
import pytest
from anyio import to_thread
from redis.asyncio import Redis

from dispatch.cli import quick
from dispatch.client import HOUR_MS, Client
from dispatch.config.settings import Settings, from_env
from dispatch.errors import Conflict
from dispatch.model import Job, Result, new_id
from dispatch.queue.items import Enqueued, Finish
from dispatch.queue.resp import ReplyError
from tests.support.redis_server import own_redis_server, sync_client

pytestmark = pytest.mark.anyio


def _settings(url: str, prefix: str) -> Settings:
    return from_env({"DISPATCH_REDIS_URL": url, "DISPATCH_PREFIX": prefix})


async def _submit(settings: Settings, job: Job, delay_ms: int = 0) -> Enqueued:
    call = partial(quick.submit, settings, job, due_ms=0, delay_ms=delay_ms)
    return await to_thread.run_sync(partial(call, dedup_window_ms=HOUR_MS))


async def test_submit_writes_what_the_client_would(
    redis: Redis, redis_url: str, prefix: str
) -> None:
    settings, client = _settings(redis_url, prefix), Client(redis, prefix)
    first = Job(id=new_id(), command=["true"], queue="jobs", dedup="d1")
    done = await _submit(settings, first)
    assert done.created and done.id == first.id
    twin = Job(id=new_id(), command=["true"], queue="jobs", dedup="d1")
    again = await _submit(settings, twin)
    assert not again.created and again.id == first.id
    with pytest.raises(Conflict, match="already taken"):
        await _submit(settings, Job(id=first.id, command=["false"], queue="jobs"))
    later = Job(id=new_id(), command=["true"], queue="jobs@quick-host")
    await _submit(settings, later, delay_ms=60_000)
    views = {v.id: v for v in await client.list()}
    assert views[first.id].state == "waiting" and twin.id not in views
    assert views[later.id].state == "delayed"
    assert {"jobs", "jobs@quick-host"} <= set(await client.queues())  # registered, as enqueue does


async def test_submit_loads_the_script_a_server_lacks() -> None:
    with own_redis_server() as url:
        sync_client(url).script_flush()
        job = Job(id=new_id(), command=["true"])
        done = await _submit(_settings(url, "fresh"), job)
        assert done.created


async def test_a_replica_refuses_the_submit_in_one_line_and_keeps_nothing() -> None:
    """READONLY (a replica named by mistake, or a primary demoted under the CLI): the reply
    is raised as the one-line error the CLI prints, and nothing was written."""
    with own_redis_server() as primary, own_redis_server() as replica:
        where = urlsplit(primary)
        sync_client(replica).replicaof(where.hostname, where.port)
        job = Job(id=new_id(), command=["true"])
        with pytest.raises(ReplyError) as refused:
            await _submit(_settings(replica, "ro"), job)
        assert refused.value.kind == "READONLY" and "\n" not in str(refused.value)
        assert sync_client(primary).dbsize() == 0


async def test_jobs_lists_what_the_client_lists(redis: Redis, redis_url: str, prefix: str) -> None:
    settings, client = _settings(redis_url, prefix), Client(redis, prefix)
    for n in range(6):
        await client.submit(Job(id=f"q{n}", command=["true"], queue="jobs"))
    await client.submit(Job(id="later", command=["true"], queue="jobs@quick-host"), delay_ms=60_000)
    batch = await client.queue("jobs").claim(2, "host-1", 60_000)
    ended = msgspec.json.encode(Result(state="failed", outcome="failed", reason="exit-1"))
    await client.queue("jobs").finish(
        [Finish("finish", batch.claims[0].id, batch.claims[0].token, ended)]
    )
    await redis.hset(client.queue("jobs").keys.attempts, "q5", "not a number")
    await client.queue("jobs@quick-host").pause()
    for fleet_paused in (False, True):
        if fleet_paused:
            await client.pause()
        for state in (None, "waiting", "failed", "delayed"):
            for targets in (False, True):
                listed, pause = await to_thread.run_sync(quick.jobs, settings, state, 3, targets)
                expected = await client.list(state, 3, targets)
                assert [v.as_json() for v in listed] == [v.as_json() for v in expected]
                assert pause == await client.pause_state()
    states = {v.id: v.state for v in await client.list()}
    assert {states["q0"], states["q5"], states["later"]} == {"failed", "unreadable", "delayed"}
