"""The fleet's copy of run records, read and written outside the finishing script.

A run's record usually reaches Redis with its finish (`job_finish`, the same atomic step, fenced
by the claim). This module writes it outside a finish when the finish could not carry it: a
finish refused because a sweep took the claim while Redis was away (the lane's
`_keep_outcomes`), and a run a killed predecessor left in the local log (boot). Either way
the job's next pickup finds the record (the settled-record gate) and finishes with that
outcome instead of running the container a second time.

A record is stored while the claim that ran it still holds the job's lock, or while no claim
holds it and the attempt has no record by this claim or a later one (`run_record` checks and
writes in one step; an earlier claim's record of the attempt, a stopped run's, is replaced). A
run that outlived its claim while another claim holds the job (a daemon frozen or cut off past
its lock, the job handed back and run again elsewhere) reports nothing the fleet will read,
neither to `why` and `runs` nor to a later settled-record gate. Records are indexed by the
server's clock, never the host's.
"""

from __future__ import annotations

import asyncio

import msgspec
from redis.asyncio import Redis

from dispatch.model import RunRecord
from dispatch.queue.faults import redis_call
from dispatch.queue.keys import DEFAULT_PREFIX, QueueKeys, outcome_wait, queue_keys
from dispatch.queue.scripts import checked, script
from dispatch.records.disk_log import decode, encode

OUTCOME_MARK_MS = 3_600_000
Pending = tuple[str, RunRecord, "asyncio.Future[bool]"]  # queue, record, stored


class RunMirror:
    """Writes coalesce: the records of every run that ended while a write was in flight (or in
    the same loop tick) go out in one pipeline, so a busy daemon pays one round trip per batch,
    and each `put` still returns only once its own record is stored."""

    def __init__(self, redis: Redis, prefix: str = DEFAULT_PREFIX) -> None:
        self.redis = redis
        self.prefix = prefix
        self._pending: list[Pending] = []
        self._writer: asyncio.Task[None] | None = None

    async def put(self, queue: str, record: RunRecord) -> bool:
        """True once stored; False when its claim no longer holds the lock (or it names none)."""
        if not record.claim:
            return False
        stored: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((queue, record, stored))
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._drain())
        return await stored

    async def _drain(self) -> None:
        try:
            while self._pending:
                await asyncio.sleep(0)  # let the runs ending in this tick join the batch
                batch, self._pending = self._pending, []
                try:
                    stored = await self._write(batch)
                except Exception as exc:
                    _settle(batch, exc, set())
                else:
                    _settle(batch, None, stored)
        finally:
            self._writer = None

    async def _write(self, batch: list[Pending]) -> set[tuple[str, str]]:
        """One script call per queue (a batch is nearly always one queue); (queue, run id)
        of each record stored."""
        args: dict[str, list[str | bytes | int]] = {}
        for queue, record, _ in batch:
            args.setdefault(queue, []).extend(
                [record.id, record.claim, record.run_id, encode(record)]
            )
        stored: set[tuple[str, str]] = set()
        for queue, argv in args.items():
            ids = await record_runs(self.redis, queue_keys(queue, self.prefix), argv)
            stored.update((queue, run_id) for run_id in ids)
        return stored

    async def first_look_since_stall(self, queue: str, job_id: str, stalls: int) -> bool:
        """True once per (job, stall count): the settled gate's one beat of waiting for a late
        outcome (gates/settled.py). The mark outlives any wait worth having, then goes."""
        key = outcome_wait(queue, job_id, stalls, self.prefix)
        with redis_call("run mirror"):
            return bool(await self.redis.set(key, 1, nx=True, px=OUTCOME_MARK_MS))

    async def get(self, queue: str, run_id: str) -> RunRecord | None:
        """The mirrored record, or None when there is none or it does not decode; a fault of
        Redis raises RedisUnavailable (the processor defers the job)."""
        with redis_call("run mirror"):
            raw = await self.redis.hget(queue_keys(queue, self.prefix).runs, run_id)
        if raw is None:
            return None
        try:
            return decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None


async def record_runs(redis: Redis, k: QueueKeys, argv: list[str | bytes | int]) -> list[str]:
    """`run_record` for one queue: argv is (id, token, run id, record) per record; the run ids
    stored (see the module docstring for which are)."""
    reply = await script("run_record")(redis, [k.lock, k.runs, k.runs_idx], argv)
    return [run_id.decode() for run_id in checked(reply, "run record")]


def _settle(batch: list[Pending], error: Exception | None, stored: set[tuple[str, str]]) -> None:
    for queue, record, done in batch:
        if done.done():  # its caller gave up waiting
            continue
        if error is None:
            done.set_result((queue, record.run_id) in stored)
        else:
            done.set_exception(error)
