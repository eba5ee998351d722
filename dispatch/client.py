"""The public Python API: what the CLI does, for tools that enqueue from code.

    from dispatch import Client, Job, new_id
    async with Client.from_env() as client:
        job_id = (await client.submit(Job(id=new_id(), command=["make", "test"]))).id
        view = await client.get(job_id)

Reads are plain pipelined commands across the registered queues; every change goes through
the queue's scripts.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import time
from types import TracebackType
from typing import Any

import msgspec
from redis.asyncio import Redis

from dispatch.clock import Clock, SystemClock
from dispatch.config.settings import Settings, default_host, from_env
from dispatch.errors import Conflict, LockLost, NotFound, RedisUnavailable
from dispatch.gates.wait.state import WaitState, WaitStates
from dispatch.model import (
    DeferRecord,
    Job,
    Result,
    RunRecord,
    encoder,
    iso,
)
from dispatch.queue import fleet_pause, keys
from dispatch.queue.connect import redis_client, settled
from dispatch.queue.faults import REDIS_FAULTS
from dispatch.queue.fleet_pause import PauseState
from dispatch.queue.heartbeats import heartbeats as heartbeats_of
from dispatch.queue.items import new_job, taken_refused
from dispatch.queue.transitions import Enqueued, Queue
from dispatch.reasons import CANCELLED, OPERATOR_CANCEL
from dispatch.records.job_views import CancelAnswer as CancelAnswer
from dispatch.records.job_views import CancelOutcome as CancelOutcome
from dispatch.records.job_views import JobView as JobView
from dispatch.records.job_views import (
    decoded_views,
    list_commands,
    listed,
    view_commands,
    wanted_state,
)
from dispatch.records.unreadable import Unreadable, run_record

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
# Every read ends at the socket timeout (a silent server is an error, not a hang), so a long
# blocking wait is taken in steps well under it; redis-py 8 defaults to the same 5 s.
_SOCKET_TIMEOUT_S = 5.0
_RECORD_CHUNK = 1000  # run records read per round trip by `records_since`
_ACK_STEP_S = 0.5  # also how soon a claim that ended while we waited is noticed
_GONE_STEP_S = 0.2  # how often a killed run's claim is looked at
# A job that changes state between two round trips this many times in a row is not racing
# one cancel: something else is wrong, and the caller hears so.
_CANCEL_LOOKS = 20
_defer = msgspec.json.Decoder(DeferRecord)
_result = msgspec.json.Decoder(Result)


class Client:
    def __init__(
        self,
        redis: Redis,
        prefix: str = keys.DEFAULT_PREFIX,
        host: str | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.host = host or default_host()
        self.clock: Clock = clock or SystemClock()
        self._unsettled_url = ""  # a URL whose server is asked, on entry, if it is a cluster

    @classmethod
    def from_settings(cls, settings: Settings) -> Client:
        redis = redis_client(settings.redis_url, socket_timeout=_SOCKET_TIMEOUT_S)
        client = cls(redis, settings.prefix, settings.host)
        client._unsettled_url = settings.redis_url
        return client

    @classmethod
    def from_env(cls) -> Client:
        return cls.from_settings(from_env())

    async def __aenter__(self) -> Client:
        await self.settle()
        return self

    async def settle(self, timeout_s: float = _SOCKET_TIMEOUT_S) -> None:
        """A client made from settings asks, once, whether its server is a node of a cluster
        (and becomes a cluster's client if so). A Redis away now, or silent past `timeout_s`,
        leaves it to ask again at the next call of this; its own first call meanwhile says
        Redis is away, as it would."""
        if self._unsettled_url:
            with contextlib.suppress(*REDIS_FAULTS):
                async with asyncio.timeout(timeout_s):
                    self.redis = await settled(self.redis, self._unsettled_url, timeout_s)
                self._unsettled_url = ""

    async def __aexit__(
        self, *exc: type[BaseException] | BaseException | TracebackType | None
    ) -> None:
        await self.redis.aclose()

    def queue(self, name: str) -> Queue:
        return Queue(self.redis, name, self.prefix)

    async def queues(self) -> builtins.list[str]:
        return await fleet_pause.registered(self.redis, self.prefix)

    async def submit(
        self, job: Job, *, due_ms: int = 0, delay_ms: int = 0, dedup_window_ms: int = HOUR_MS
    ) -> Enqueued:
        """Validate and enqueue; a duplicate (same dedup key, window open) returns the first id."""
        new = new_job(job, due_ms, delay_ms, dedup_window_ms)
        return taken_refused(job, (await self.queue(job.queue).enqueue([new]))[0])

    async def get(self, job_id: str) -> JobView | None:
        """The job in the first queue (by name) that holds it: one round trip for all queues."""
        views = await self._views([(name, job_id) for name in await self.queues()])
        return next((v for v in views if v is not None), None)

    async def _views(
        self, wanted: builtins.list[tuple[str, str]], targets: bool = False
    ) -> builtins.list[JobView | None]:
        """Each (queue, id)'s fields in one pipelined round trip, whatever the number of pairs,
        with whether the fleet or the job's queue is paused; `targets` reads each document too,
        for what the job works on (`JobView.target`)."""
        commands = view_commands(wanted, self.prefix, targets)
        async with self.redis.pipeline(transaction=False) as p:
            for command in commands:
                p.execute_command(*command)
            return decoded_views(wanted, await p.execute(), targets)

    async def views(
        self, wanted: builtins.list[tuple[str, str]], targets: bool = False
    ) -> builtins.list[JobView | None]:
        """The view of each (queue, id), None where that queue holds no such job: one round
        trip, whatever the number (`targets`: with what each works on and its project)."""
        return await self._views(wanted, targets)

    async def list(
        self, state: str | None = None, limit: int = 200, targets: bool = False
    ) -> builtins.list[JobView]:
        """Up to `limit` jobs of each state group per queue: two round trips for all queues
        (`targets`: with what each works on, read from its document)."""
        names = await self.queues()
        async with self.redis.pipeline(transaction=False) as p:
            for command in list_commands(names, self.prefix, limit):
                p.execute_command(*command)
            groups = await p.execute()
        found = await self._views(listed(names, groups), targets)
        return wanted_state(found, state)

    async def cancel(self, job_id: str, wait_s: float = 10.0, kill: bool = False) -> CancelAnswer:
        """Stop exactly one job, whatever its state; raise NotFound for an unknown id.

        A job can move while this looks (its claim ends, a deferred job is picked up again):
        then it is looked at again, so the answer says where the job is now. For a running job,
        wait up to `wait_s` for its owner's acknowledgement or for the claim to end. With
        `kill`, the owner kills the run at once (no grace) or, if its stop did not take, sends
        the engine's kill again; then this waits the rest of `wait_s` for the run to be gone."""
        deadline = time.monotonic() + wait_s
        requested = False
        for _ in range(_CANCEL_LOOKS):
            view = await self.get(job_id)
            if view is None:
                raise NotFound(f"no job {job_id}")
            q = self.queue(view.queue)
            code, token = await q.cancel(job_id, *self._cancel_record(view))
            if code == 1:
                await self._forget_wait(view)
                return CancelAnswer("cancelled")
            if code == 3:
                return await self._ended(job_id, requested)
            owner = token.rpartition(":")[0]
            if not owner or not await self.redis.exists(keys.host_alive(owner, self.prefix)):
                return CancelAnswer("unowned", owner)
            # a request stands at most a day, the script's bound, however long the wait
            ttl_ms = int(min(max(wait_s, 1) * 3000, DAY_MS))
            if kill:  # before the cancel: the owner reads both at the same renewal
                await self.redis.set(q.keys.kill(job_id), token, px=ttl_ms)
            try:
                await q.request_cancel(job_id, token, ttl_ms)
            except LockLost:
                continue  # the claim ended between the two calls: look again
            requested = True
            answer = await self._acknowledged(q, job_id, token, deadline)
            if answer is not None and kill and answer.outcome == "taken":
                return await self._gone(q, job_id, token, deadline, answer.host)
            if answer is not None:
                return answer
        raise Conflict(f"cancel {job_id}: the job kept changing state; nothing more was asked")

    async def wait_state(self, view: JobView) -> WaitState | None:
        """What the wait-for gate knows of the job's wait, if it has looked at one."""
        return await WaitStates(self.redis, self.prefix).get(view.queue, view.id)

    async def _forget_wait(self, view: JobView) -> None:
        """A cancelled job's wait state goes; failing that, its TTL removes it."""
        with contextlib.suppress(RedisUnavailable):
            await WaitStates(self.redis, self.prefix).forget(view.queue, [view.id])

    def _cancel_record(self, view: JobView) -> tuple[bytes, str, bytes]:
        """The result and run record written for a job cancelled before it started."""
        record = RunRecord(
            id=view.id,
            attempt=view.attempt,
            host=self.host,
            queue=view.queue,
            outcome=CANCELLED,
            reason=OPERATOR_CANCEL,
            queued_at=view.queued_at,
            ended_at=iso(self.clock.now_ms()),
        )
        result = Result(
            state="cancelled",
            outcome=CANCELLED,
            reason=OPERATOR_CANCEL,
            host=self.host,
            ended_at=record.ended_at or "",
        )
        return encoder.encode(result), record.run_id, encoder.encode(record)

    async def _ended(self, job_id: str, requested: bool) -> CancelAnswer:
        """A finished job: cancelled by our request (its owner ended it so), or on its own."""
        view = await self.get(job_id)
        result = view.result if view else None
        if requested and result is not None and result.reason == OPERATOR_CANCEL:
            return CancelAnswer("cancelled", result.host)
        return CancelAnswer("finished")

    async def _gone(
        self, q: Queue, job_id: str, token: str, deadline: float, host: str
    ) -> CancelAnswer:
        """After a kill was taken: whether the run's claim ended before the deadline."""
        while True:
            if _text(await self.redis.hget(q.keys.lock, job_id) or b"") != token:
                return CancelAnswer("killed", host)
            if (left := deadline - time.monotonic()) <= 0:
                return CancelAnswer("kill-sent", host)
            await asyncio.sleep(min(left, _GONE_STEP_S))

    async def stuck_stop(self, view: JobView) -> dict[str, str] | None:
        """What the owner's heartbeat says of the job's run if its stop did not take."""
        if view.state != "active" or not view.owner:
            return None
        beat = (await heartbeats_of(self.redis, self.prefix, [view.owner])).get(view.owner, {})
        found = [s for s in beat.get("stuck") or () if isinstance(s, dict)]
        return next((s for s in found if s.get("job") == view.id), None)

    async def _acknowledged(
        self, q: Queue, job_id: str, token: str, deadline: float
    ) -> CancelAnswer | None:
        """The owner's acknowledgement; None when the claim ended first (look again)."""
        while (left := deadline - time.monotonic()) > 0:
            # in steps: redis-py cuts any read, BLPOP's included, at the socket timeout
            reply = await self.redis.blpop([q.keys.ack(job_id)], timeout=min(left, _ACK_STEP_S))
            if reply is not None:
                return CancelAnswer("taken", _text(reply[1]))
            if _text(await self.redis.hget(q.keys.lock, job_id) or b"") != token:
                return None
        return CancelAnswer("unacknowledged", token.rpartition(":")[0])

    async def runs(self, limit: int = 50) -> builtins.list[RunRecord]:
        """The fleet's most recent run records (the Redis mirror), newest first."""
        return [r for r in await self.run_rows(limit) if isinstance(r, RunRecord)]

    async def run_rows(self, limit: int = 50) -> builtins.list[RunRecord | Unreadable]:
        """`runs`, with each record that does not decode in its place as `Unreadable`.

        Two round trips for all queues: every queue's index, then the records it names."""
        names = await self.queues()
        all_keys = [keys.queue_keys(name, self.prefix) for name in names]
        async with self.redis.pipeline(transaction=False) as p:
            for k in all_keys:
                p.zrevrange(k.runs_idx, 0, limit - 1, withscores=True)
            indexes = await p.execute()
        indexed = [
            (name, k, idx) for name, k, idx in zip(names, all_keys, indexes, strict=True) if idx
        ]
        if not indexed:
            return []
        async with self.redis.pipeline(transaction=False) as p:
            for _, k, idx in indexed:
                p.hmget(k.runs, [run_id for run_id, _ in idx])
            raws = await p.execute()
        found = [
            (float(score), run_record(name, _text(run_id), raw))
            for (name, _, idx), raw_records in zip(indexed, raws, strict=True)
            for (run_id, score), raw in zip(idx, raw_records, strict=True)
            if raw
        ]
        found.sort(key=lambda pair: pair[0], reverse=True)
        return [record for _, record in found[:limit]]

    async def records_since(self, since_ms: int, most: int = 200_000) -> builtins.list[RunRecord]:
        """Every queue's run records indexed at or after `since_ms` (server ms), up to `most`
        per queue, newest kept; records that do not decode are left out. Read in pipelined
        chunks of `_RECORD_CHUNK`, so a month of runs is a few round trips per thousand."""
        names = await self.queues()
        all_keys = [keys.queue_keys(name, self.prefix) for name in names]
        async with self.redis.pipeline(transaction=False) as p:
            for k in all_keys:
                p.zrevrangebyscore(k.runs_idx, "+inf", since_ms, start=0, num=most)
            indexes = await p.execute()
        wanted = [(k, _text(r)) for k, idx in zip(all_keys, indexes, strict=True) for r in idx]
        found: builtins.list[RunRecord] = []
        for part in _chunks(wanted, _RECORD_CHUNK):
            async with self.redis.pipeline(transaction=False) as p:
                for k, run_id in part:
                    p.hget(k.runs, run_id)
                raws = await p.execute()
            for (k, run_id), raw in zip(part, raws, strict=True):
                record = run_record(k.tag, run_id, raw) if raw else None
                if isinstance(record, RunRecord):
                    found.append(record)
        return found

    async def records_of(self, view: JobView, last: int = 10) -> builtins.list[RunRecord]:
        """The fleet's run records of the job's latest `last` attempts, oldest first."""
        first = max(1, view.attempt - last + 1)
        run_ids = [f"{view.id}#{n}" for n in range(first, view.attempt + 1)]
        if not run_ids:  # an unreadable job's attempt is not known
            return []
        raws = await self.redis.hmget(keys.queue_keys(view.queue, self.prefix).runs, run_ids)
        found = [run_record(view.queue, "", raw) for raw in raws if raw]
        return [r for r in found if isinstance(r, RunRecord)]  # the story goes on without it

    async def pause(self) -> builtins.list[str]:
        """Pause the fleet, durably: no queue, old or new, starts a job until `resume`.

        The queues paused now; a queue first used later is paused by its daemon before it
        claims (`queue/fleet_pause.py` says what is guaranteed)."""
        at = iso(self.clock.now_ms()) or ""
        return await fleet_pause.pause(self.redis, self.prefix, at=at, by=self.host)

    async def resume(self) -> builtins.list[str]:
        """Lift the fleet pause and every registered queue's own pause."""
        return await fleet_pause.resume(self.redis, self.prefix)

    async def pause_state(self) -> PauseState:
        """The fleet pause, if one stands, and which registered queues are paused."""
        return await fleet_pause.state(self.redis, self.prefix, await self.queues())


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
