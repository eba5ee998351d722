"""The fleet's copy of run records, read and written outside the finishing script.

A container's outcome is mirrored as soon as it is known, before the claim is ended: if this
daemon dies in between, the job's next pickup finds the record (the settled-record gate) and
finishes with that outcome instead of running the container a second time.
"""

from __future__ import annotations

import asyncio

import msgspec
from redis.asyncio import Redis

from dispatch.model import RunRecord
from dispatch.queue.faults import redis_call
from dispatch.queue.keys import DEFAULT_PREFIX, queue_keys
from dispatch.records.disk_log import decode, encode


class RunMirror:
    """Writes coalesce: the records of every run that ended while a write was in flight (or in
    the same loop tick) go out in one pipeline, so a busy daemon pays one round trip per batch,
    and each `put` still returns only once its own record is stored."""

    def __init__(self, redis: Redis, prefix: str = DEFAULT_PREFIX) -> None:
        self.redis = redis
        self.prefix = prefix
        self._pending: list[tuple[str, RunRecord, int, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def put(self, queue: str, record: RunRecord, ended_ms: int) -> None:
        stored = asyncio.get_running_loop().create_future()
        self._pending.append((queue, record, ended_ms, stored))
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._drain())
        await stored

    async def _drain(self) -> None:
        try:
            while self._pending:
                await asyncio.sleep(0)  # let the runs ending in this tick join the batch
                batch, self._pending = self._pending, []
                try:
                    await self._write(batch)
                except Exception as exc:
                    _settle(batch, exc)
                else:
                    _settle(batch, None)
        finally:
            self._writer = None

    async def _write(self, batch: list[tuple[str, RunRecord, int, asyncio.Future[None]]]) -> None:
        records: dict[str, dict[str, bytes]] = {}
        ended: dict[str, dict[str, int]] = {}
        for queue, record, ended_ms, _ in batch:
            records.setdefault(queue, {})[record.run_id] = encode(record)
            ended.setdefault(queue, {})[record.run_id] = ended_ms
        async with self.redis.pipeline(transaction=False) as pipe:
            for queue, by_id in records.items():  # one HSET and one ZADD per queue
                k = queue_keys(queue, self.prefix)
                pipe.hset(k.runs, mapping=by_id)  # type: ignore[arg-type]
                pipe.zadd(k.runs_idx, ended[queue])
            await pipe.execute()

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


def _settle(
    batch: list[tuple[str, RunRecord, int, asyncio.Future[None]]], error: Exception | None
) -> None:
    for *_, stored in batch:
        if stored.done():  # its caller gave up waiting
            continue
        if error is None:
            stored.set_result(None)
        else:
            stored.set_exception(error)
