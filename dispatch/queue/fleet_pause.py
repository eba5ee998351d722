"""The fleet pause: while it stands no queue, old or new, starts a job; jobs still enqueue.

The truth is one key of its own slot, `<prefix>:paused` (`keys.fleet_paused`), holding the
pause as JSON with a fresh id. `job_claim` cannot read it (a script touches one queue's slot),
so every queue carries a copy in its own `paused` key, `fleet:<id>`, and claims nothing while
that key exists. Three writers keep the copies in step:

- `pause` (`dispatch pause`) stores the fleet key, then loads the queue registry and writes
  the copy into every queue in it.
- `follow`, called by a daemon before its first claim and with every heartbeat, stores the
  daemon's queues in the registry, then loads the fleet key, and writes the copy into any of
  them that is not paused. Both sides store before they load, so when a pause and a daemon's
  start meet, at least one of them sees the other: the queue is paused before it can claim.
- `resume` (`dispatch resume`) deletes the fleet key, then lifts every registered queue's
  pause (any pause: fleet copy, a pause set by hand, or one from an older release).

A daemon starting while a resume runs may write a copy just after the resume lifted it. So
`follow` also lifts, on the daemon's own queues, a fleet copy that the fleet key no longer
backs; it reads the copies before the fleet key, and lifts through `queue_unpause.lua` only
the exact copy it read, so a newer pause (a new id, written after its fleet key) is never
lifted. A queue paused by other means (a value without `fleet:`) is left to `resume`.

What is guaranteed, for daemons of this release:
- once `dispatch pause` has returned, no daemon claims a job from any queue, whether the queue
  was in use, gets its first job later, or belongs to a host that starts later; jobs claimed
  before it (in the gates, or running) go on;
- once `dispatch resume` has returned, every registered queue claims again, except one that a
  daemon starting at that moment paused again: that daemon lifts it at its next pause check
  (every other heartbeat).
Not guaranteed: a daemon of an older release pauses nothing itself (its host queue is paused
only if it was registered when `dispatch pause` ran); and a pause and a resume given at the
same moment end as either order would, queue by queue, until the daemons' next heartbeats
bring every queue a live daemon reads in line with the fleet key.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterable

import msgspec
from redis.asyncio import Redis

from dispatch.log import event
from dispatch.queue import keys
from dispatch.queue.pause_marks import FLEET_MARK as FLEET_MARK
from dispatch.queue.pause_marks import SHARED_QUEUE as SHARED_QUEUE
from dispatch.queue.pause_marks import FleetPause as FleetPause
from dispatch.queue.pause_marks import PauseState as PauseState
from dispatch.queue.pause_marks import decode as decode
from dispatch.queue.pause_marks import registered_names
from dispatch.queue.transitions import Queue


async def registered(redis: Redis, prefix: str) -> list[str]:
    return registered_names(await redis.smembers(keys.queues_registry(prefix)))


async def pause(redis: Redis, prefix: str, *, at: str = "", by: str = "") -> list[str]:
    """Pause the fleet; the names of the queues paused now (later ones pause themselves)."""
    standing = FleetPause(id=secrets.token_hex(8), at=at, by=by)
    await redis.set(keys.fleet_paused(prefix), msgspec.json.encode(standing))
    names = await registered(redis, prefix)  # loaded after the store: see the docstring
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.set(keys.queue_keys(name, prefix).paused, standing.mark)
        await pipe.execute()
    return names


async def resume(redis: Redis, prefix: str) -> list[str]:
    """Lift the fleet pause and every registered queue's own; the names of those queues."""
    await redis.delete(keys.fleet_paused(prefix))
    names = await registered(redis, prefix)
    await asyncio.gather(*(Queue(redis, name, prefix).resume() for name in names))
    return names


async def state(redis: Redis, prefix: str, names: Iterable[str]) -> PauseState:
    """The fleet pause and which of `names` are paused, in one round trip."""
    names = list(names)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.get(keys.fleet_paused(prefix))
        for name in names:
            pipe.exists(keys.queue_keys(name, prefix).paused)
        raw, *flags = await pipe.execute()
    return PauseState(decode(raw), [n for n, f in zip(names, flags, strict=True) if f])


async def follow(redis: Redis, prefix: str, names: Iterable[str], register: bool = True) -> None:
    """A daemon's side: register its queues (needed once: before its first claim), then bring
    their pause in line with the fleet's."""
    queues = [Queue(redis, name, prefix) for name in names]
    async with redis.pipeline(transaction=False) as pipe:
        if register:
            pipe.sadd(keys.queues_registry(prefix), *(q.name for q in queues))
        for q in queues:
            pipe.get(q.keys.paused)
        pipe.get(keys.fleet_paused(prefix))  # last: after the store and the copies were read
        replies = await pipe.execute()
    copies, raw = replies[int(register) : -1], replies[-1]
    standing = decode(raw)
    for q, copy in zip(queues, copies, strict=True):
        await _align(q, _text(copy) if copy is not None else None, standing)


async def _align(q: Queue, copy: str | None, standing: FleetPause | None) -> None:
    if standing is not None and copy is None:
        await q.pause(standing.mark, replace=False)
        event("fleet_pause_followed", queue=q.name, pause=standing.id)
    elif standing is None and copy and copy.startswith(FLEET_MARK) and await q.unpause(copy):
        event("fleet_resume_followed", queue=q.name)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
