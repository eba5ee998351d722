"""`dispatch submit` and `dispatch jobs` without redis-py: what a shell script runs in a loop.

Both make a few round trips on one blocking connection (queue/resp.py) and exit; loading
redis-py's asyncio client would take longer than the whole command. They share with `Client`
every part that is not the transport: the job's checks (`new_job`), the script's keys and
arguments (`enqueue_call`), what its answer means (`enqueued`), and the listing's reads and
their decoding (`records/job_views.py`). A target this path does not speak to (a cluster, TLS,
URL options: `Unsupported`) goes through `Client`, as every other command does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dispatch.config.settings import Settings
from dispatch.model import Job
from dispatch.queue import keys
from dispatch.queue.items import Enqueued, enqueue_call, enqueued, new_job, taken_refused
from dispatch.queue.lua_source import checked, source
from dispatch.queue.resp import ReplyError, Resp, Unsupported

if TYPE_CHECKING:
    from dispatch.queue.pause_marks import PauseState
    from dispatch.records.job_views import JobView

TIMEOUT_S = 5.0  # as the Client's: a silent server is an error, not a hang


def submit(
    settings: Settings, job: Job, *, due_ms: int, delay_ms: int, dedup_window_ms: int
) -> Enqueued:
    """What `Client.submit` does, in three round trips (the first asks what the server is),
    four when the server lacks the script."""
    new = new_job(job, due_ms, delay_ms, dedup_window_ms)
    try:
        conn = Resp.open(settings.redis_url, TIMEOUT_S)
    except Unsupported:
        return _with_client(settings, job, due_ms, delay_ms, dedup_window_ms)
    with conn:
        script_keys, args = enqueue_call(keys.queue_keys(job.queue, settings.prefix), [new])
        lua = source("job_enqueue")
        call = ("EVALSHA", lua.sha, len(script_keys), *script_keys, *args)
        (reply,) = conn.pipeline([call])
        if isinstance(reply, ReplyError) and reply.kind == "NOSCRIPT":
            reply = conn.pipeline([("SCRIPT", "LOAD", lua.source), call])[1]
        if isinstance(reply, ReplyError):
            raise reply
        done = enqueued(checked(reply, "enqueue"))[0]
        # registered once the queue really holds something, as `Queue.enqueue` does
        conn.call("SADD", keys.queues_registry(settings.prefix), job.queue)
    return taken_refused(job, done)


def jobs(
    settings: Settings, state: str | None, limit: int, targets: bool
) -> tuple[list[JobView], PauseState]:
    """What `Client.list` and `Client.pause_state` say, in four round trips."""
    from dispatch.queue.pause_marks import PauseState, decode, registered_names
    from dispatch.records import job_views

    try:
        conn = Resp.open(settings.redis_url, TIMEOUT_S)
    except Unsupported:
        return _listed_by_client(settings, state, limit, targets)
    prefix = settings.prefix
    with conn:
        names = registered_names(conn.call("SMEMBERS", keys.queues_registry(prefix)))
        wanted = job_views.listed(
            names, _replies(conn, job_views.list_commands(names, prefix, limit))
        )
        pause = [("GET", keys.fleet_paused(prefix))]
        pause += [("EXISTS", keys.queue_keys(n, prefix).paused) for n in names]
        replies = _replies(conn, [*job_views.view_commands(wanted, prefix, targets), *pause])
    views, (fleet, *flags) = replies[: -len(pause)], replies[-len(pause) :]
    found = job_views.wanted_state(job_views.decoded_views(wanted, views, targets), state)
    return found, PauseState(decode(fleet), [n for n, f in zip(names, flags, strict=True) if f])


def _replies(conn: Resp, commands: Sequence[tuple[str | int, ...]]) -> list[Any]:
    return conn.pipeline(commands, raise_on_error=True)


def _listed_by_client(
    settings: Settings, state: str | None, limit: int, targets: bool
) -> tuple[list[JobView], PauseState]:
    import asyncio

    from dispatch.client import Client

    async def go() -> tuple[list[JobView], PauseState]:
        async with Client.from_settings(settings) as client:
            return await client.list(state, limit, targets), await client.pause_state()

    return asyncio.run(go())


def _with_client(
    settings: Settings, job: Job, due_ms: int, delay_ms: int, dedup_window_ms: int
) -> Enqueued:
    import asyncio

    from dispatch.client import Client

    async def go() -> Enqueued:
        async with Client.from_settings(settings) as client:
            return await client.submit(
                job, due_ms=due_ms, delay_ms=delay_ms, dedup_window_ms=dedup_window_ms
            )

    return asyncio.run(go())
