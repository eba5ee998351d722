"""What a daemon does before it claims anything, and the reconcile that repeats its reap.

Boot. A daemon that starts runs nothing yet, and it alone holds its host name
(`daemon/instance.py`), so every claim whose token names this host (`<host>:<n>`) was left by a
predecessor that died or was stopped mid-run. In this order:

  1. read this host's claims (`Queue.claims_of`) and every other claim of its queues;
  2. reap: the runner stops and removes the runs of this host that no live claim owns; a claim
     about to be handed back does not count as live (its run is the predecessor's, and must
     stop before the job can run again);
  3. a claim whose run reached its own exit, known only to this host's run log (the
     predecessor died before Redis had the record), gets that record put in the fleet's
     mirror, so the hand-back leaves it to end as it ran (settled gate) instead of running it
     again;
  4. hand those claims back to the head of wait (`Queue.hand_back`): they run again at once,
     spending no attempt and counting no stall, rather than lapsing with their lock (a claim
     whose run was recorded before its finish landed is left to lapse: after that stall the
     settled gate ends it as recorded, rather than running it twice);
  5. free this host's stale fleet lease holders (`sweep_host`).

A step runs only once the one before it succeeded, so a claim is handed on, and a lease freed,
only when its run is known gone (for Docker: listed and removed). A failed boot is logged and
retried with backoff until it succeeds, and nothing is claimed before; every step is idempotent,
so a retry does no harm.

Reconcile. Every `DISPATCH_RECONCILE_EVERY` the runner reaps again, a run counting as live when
the lock hash still holds its claim's token or this process runs it now: a container whose claim
is gone (a removal that failed, a run left behind past its abort wait) is removed. The claims
are read before the runner lists its runs, and a run this process starts meanwhile is in `held`
(read as each run is judged), so a run that has just started is never taken for an orphan.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from dispatch.daemon.tasks import OnStop, every, set_within
from dispatch.errors import DispatchError
from dispatch.fleet.leases import known_leases, sweep_host
from dispatch.gates.settled import own_exit
from dispatch.log import event
from dispatch.queue.transitions import Queue
from dispatch.records.disk_log import RecordLog
from dispatch.records.mirror import RunMirror
from dispatch.runners.base import Runner

Pair = tuple[str, str]  # (job id, lock token); a run's fence is its claim's token
_FAULTS = (DispatchError, RedisError, OSError)


@dataclass(frozen=True)
class LeftRecords:
    """Where a predecessor's finished runs may be found: this host's run log, and the fleet's
    mirror they are copied into."""

    log: RecordLog
    mirror: RunMirror


async def boot(
    redis: Redis,
    runner: Runner,
    host: str,
    prefix: str,
    queues: Sequence[Queue],
    left: LeftRecords | None = None,
) -> bool:
    """One attempt at the boot; False when a step could not be done (logged)."""
    try:
        mine = {queue: await queue.claims_of(host) for queue in queues}
        ending = {pair for pairs in mine.values() for pair in pairs}
        live = await _claims(queues) - ending
    except _FAULTS as exc:
        event("boot_claims_unread", error=str(exc))
        return False
    if not await runner.reap(host, lambda job, fence: (job, fence) in live):
        event("boot_reap_incomplete", detail="runs left could not all be listed and removed")
        return False
    try:
        for queue, pairs in mine.items():
            if left is not None:
                await _recover_records(queue, pairs, left)
            await _hand_back(queue, pairs)
        await sweep_host(redis, await known_leases(redis, prefix), host)
    except _FAULTS as exc:
        event("boot_handback_failed", error=str(exc))
        return False
    return True


async def boot_until_done(
    redis: Redis,
    runner: Runner,
    host: str,
    prefix: str,
    queues: Sequence[Queue],
    stop: asyncio.Event,
    *,
    left: LeftRecords | None = None,
    first_s: float = 1.0,
    most_s: float = 30.0,
) -> bool:
    """Boot, retrying with backoff; False only when `stop` was set first."""
    delay = first_s
    while not stop.is_set():
        if await boot(redis, runner, host, prefix, queues, left):
            return True
        event("boot_retry", host=host, in_s=round(delay, 1))
        if await set_within(stop, delay):
            break
        delay = min(delay * 2, most_s)
    return False


async def reconcile(
    runner: Runner, host: str, queues: Sequence[Queue], held: Callable[[], Collection[Pair]]
) -> bool:
    """Remove this host's runs whose claim is gone; the runner's answer (True: all gone)."""
    live = await _claims(queues)  # before the runner lists: a later claim is in `held`
    return await runner.reap(
        host, lambda job, fence: (job, fence) in live or (job, fence) in held()
    )


async def reconcile_every(
    every_s: float,
    stop: asyncio.Event,
    runner: Runner,
    host: str,
    queues: Sequence[Queue],
    held: Callable[[], Collection[Pair]],
) -> None:
    """The reconcile as an upkeep loop (`tasks.every`, until `stop`): a fault is logged and the
    next round tries again."""

    async def step() -> None:
        try:
            if not await reconcile(runner, host, queues, held):
                event("reconcile_incomplete", host=host)
        except _FAULTS as exc:
            event("reconcile_failed", host=host, error=str(exc))

    await every("reconcile", every_s, step, OnStop(stop), jitter=False)


async def _claims(queues: Sequence[Queue]) -> set[Pair]:
    return {pair for queue in queues for pair in await queue.claims()}


async def _recover_records(queue: Queue, pairs: Sequence[Pair], left: LeftRecords) -> None:
    tokens = dict(pairs)
    if not tokens:
        return
    found = [r for r in left.log.read() if tokens.get(r.id) == r.claim and r.queue == queue.name]
    for record in found:
        if own_exit(record) and await left.mirror.put(queue.name, record):
            event("run_recovered_from_log", job=record.id, attempt=record.attempt)


async def _hand_back(queue: Queue, pairs: Sequence[Pair]) -> None:
    handed, recorded = await queue.hand_back(pairs)
    if pairs:
        event("claims_handed_back", queue=queue.name, jobs=handed, left_recorded=recorded)
