"""The public Python API: what the CLI does, for tools that enqueue from code.

    from dispatch import Client, Job
    async with Client.from_env() as client:
        job_id = (await client.submit(Job(id=new_id(), command=["make", "test"]))).id
        view = await client.get(job_id)

Reads are plain pipelined commands across the registered queues; every change goes through
the queue's scripts.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import msgspec
from redis.asyncio import Redis

from dispatch import keys
from dispatch.clock import SystemClock
from dispatch.config import Settings, default_host, from_env
from dispatch.errors import Conflict, InvalidJob, NotFound
from dispatch.model import (
    DeferRecord,
    Job,
    Result,
    RunRecord,
    decode_job,
    encode_job,
    encoder,
    iso,
    one_line,
)
from dispatch.queue import Enqueued, NewJob, Queue
from dispatch.records import decode as decode_record

HOUR_MS = 3_600_000
_defer = msgspec.json.Decoder(DeferRecord)
_result = msgspec.json.Decoder(Result)


@dataclass
class JobView:
    id: str
    queue: str
    state: str  # waiting | delayed | active | completed | failed | cancelled
    attempt: int = 0
    stalls: int = 0
    queued_at: str | None = None
    until: str | None = None  # when a delayed job is due
    owner: str | None = None  # host holding an active job's claim
    token: str | None = None
    defer: DeferRecord | None = None
    result: Result | None = None
    data: bytes = b""

    @property
    def reason(self) -> str:
        if self.result is not None:
            return self.result.reason
        return self.defer.reason if self.defer and self.state == "delayed" else ""

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "queue": self.queue,
            "state": self.state,
            "reason": self.reason,
            "until": self.until,
            "attempt": self.attempt,
            "owner": self.owner,
            "queued_at": self.queued_at,
            "defer": msgspec.to_builtins(self.defer) if self.defer else None,
            "result": msgspec.to_builtins(self.result) if self.result else None,
        }


@dataclass(frozen=True)
class CancelAnswer:
    outcome: str  # cancelled | taken | unowned | finished | unacknowledged
    host: str = ""


class Client:
    def __init__(
        self, redis: Redis, prefix: str = keys.DEFAULT_PREFIX, host: str | None = None
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.host = host or default_host()

    @classmethod
    def from_settings(cls, settings: Settings) -> Client:
        return cls(
            Redis.from_url(settings.redis_url, socket_connect_timeout=5),
            settings.prefix,
            settings.host,
        )

    @classmethod
    def from_env(cls) -> Client:
        return cls.from_settings(from_env())

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, *exc: type[BaseException] | BaseException | TracebackType | None
    ) -> None:
        await self.redis.aclose()

    def queue(self, name: str) -> Queue:
        return Queue(self.redis, name, self.prefix)

    async def queues(self) -> builtins.list[str]:
        names = {_text(n) for n in await self.redis.smembers(keys.queues_registry(self.prefix))}
        return sorted(names | {"jobs"})

    async def submit(
        self, job: Job, *, due_ms: int = 0, delay_ms: int = 0, dedup_window_ms: int = HOUR_MS
    ) -> Enqueued:
        """Validate and enqueue; a duplicate (same dedup key, window open) returns the first id."""
        raw = _checked_document(job)
        for name, value in (
            ("due", due_ms),
            ("delay", delay_ms),
            ("dedup window", dedup_window_ms),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidJob(f"{name} must be a whole number of milliseconds, 0 or more")
        new = NewJob(job.id, raw, due_ms, delay_ms, job.dedup or "", dedup_window_ms)
        done = (await self.queue(job.queue).enqueue([new]))[0]
        if done.taken:
            raise Conflict(f"job id {job.id} is already taken")
        return done

    async def get(self, job_id: str) -> JobView | None:
        for name in await self.queues():
            (view,) = await self._views(self.queue(name), [job_id])
            if view is not None:
                return view
        return None

    async def _views(self, q: Queue, ids: builtins.list[str]) -> builtins.list[JobView | None]:
        """Every job's fields in one pipelined round trip, whatever the number of ids."""
        k = q.keys
        zsets = (k.delayed, k.active, k.done)
        hashes = (k.defer, k.result, k.data, k.lock, k.attempts, k.stalls, k.queued)
        async with self.redis.pipeline(transaction=False) as p:
            for job_id in ids:
                for zset in zsets:
                    p.zscore(zset, job_id)
                for h in hashes:
                    p.hget(h, job_id)
            replies = await p.execute()
        width = len(zsets) + len(hashes)
        return [
            _view(q.name, job_id, replies[i * width : (i + 1) * width])
            for i, job_id in enumerate(ids)
        ]

    async def list(self, state: str | None = None, limit: int = 200) -> builtins.list[JobView]:
        views: builtins.list[JobView] = []
        for name in await self.queues():
            queue = self.queue(name)
            found = await self._views(queue, await self._ids(queue, limit))
            views += [v for v in found if v is not None and state in (None, v.state)]
        return views

    async def _ids(self, q: Queue, limit: int) -> builtins.list[str]:
        k = q.keys
        async with self.redis.pipeline(transaction=False) as p:
            p.zrange(k.active, 0, limit - 1)
            p.lrange(k.wait, 0, limit - 1)
            p.zrange(k.delayed, 0, limit - 1)
            p.zrevrange(k.done, 0, limit - 1)
            groups = await p.execute()
        return [_text(i) for group in groups for i in group]

    async def cancel(self, job_id: str, wait_s: float = 10.0) -> CancelAnswer:
        """Stop exactly one job, whatever its state; raise NotFound for an unknown id."""
        view = await self.get(job_id)
        if view is None:
            raise NotFound(f"no job {job_id}")
        q = self.queue(view.queue)
        record = RunRecord(
            id=job_id,
            attempt=view.attempt,
            host=self.host,
            queue=view.queue,
            outcome="cancelled",
            reason="operator-cancel",
            queued_at=view.queued_at,
            ended_at=iso(SystemClock().now_ms()),
        )
        result = Result(
            state="cancelled",
            outcome="cancelled",
            reason="operator-cancel",
            host=self.host,
            ended_at=record.ended_at or "",
        )
        code, token = await q.cancel(
            job_id, encoder.encode(result), record.run_id, encoder.encode(record)
        )
        if code == 1:
            return CancelAnswer("cancelled")
        if code == 3:
            return CancelAnswer("finished")
        return await self._cancel_running(q, job_id, token, wait_s)

    async def _cancel_running(
        self, q: Queue, job_id: str, token: str, wait_s: float
    ) -> CancelAnswer:
        owner = token.rpartition(":")[0]
        if not owner or not await self.redis.exists(keys.host_alive(owner, self.prefix)):
            return CancelAnswer("unowned", owner)
        await q.request_cancel(job_id, token, int(max(wait_s, 1) * 3000))
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            # short blocks: redis-py cuts any read at its socket timeout (5 s by default)
            reply = await self.redis.blpop([q.keys.ack(job_id)], timeout=min(left, 2.0))
            if reply is not None:
                return CancelAnswer("taken", _text(reply[1]))
        return CancelAnswer("unacknowledged", owner)

    async def runs(self, limit: int = 50) -> builtins.list[RunRecord]:
        """The fleet's most recent run records (the Redis mirror), newest first."""
        found: builtins.list[tuple[float, RunRecord]] = []
        for name in await self.queues():
            k = self.queue(name).keys
            idx: Any = await self.redis.zrevrange(k.runs_idx, 0, limit - 1, withscores=True)
            if not idx:
                continue
            raws = await self.redis.hmget(k.runs, [i for i, _ in idx])
            found += [
                (float(score), decode_record(raw))
                for (_, score), raw in zip(idx, raws, strict=True)
                if raw
            ]
        found.sort(key=lambda pair: pair[0], reverse=True)
        return [record for _, record in found[:limit]]

    async def pause(self) -> builtins.list[str]:
        names = await self.queues()
        await asyncio.gather(*(self.queue(n).pause() for n in names))
        return names

    async def resume(self) -> builtins.list[str]:
        names = await self.queues()
        await asyncio.gather(*(self.queue(n).resume() for n in names))
        return names


def _view(queue: str, job_id: str, fields: list[Any]) -> JobView | None:
    delayed, active, done, defer, result, data, lock, attempts, stalls, queued = fields
    if data is None and done is None:
        return None
    view = JobView(
        job_id,
        queue,
        "waiting",
        int(attempts or 0) + 1,
        int(stalls or 0),
        iso(int(queued)) if queued else None,
        data=data or b"",
    )
    view.defer = _defer.decode(defer) if defer else None
    if done is not None:
        view.result = _result.decode(result) if result else None
        view.state = view.result.state if view.result else "completed"
    elif active is not None:
        view.state, view.token = "active", _text(lock or b"")
        view.owner = view.token.rpartition(":")[0] or None
    elif delayed is not None:
        view.state, view.until = "delayed", iso(int(delayed))
    return view


def _checked_document(job: Job) -> bytes:
    """Encode, then decode as a daemon would: a job built in code gets the same checks."""
    try:
        raw = encode_job(job)
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidJob(one_line(f"job document: {exc}")) from None
    decode_job(raw)
    return raw


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
