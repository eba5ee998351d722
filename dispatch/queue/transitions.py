"""A queue's transitions, each one Lua script over the queue's own keys (one hash slot).

    enqueue ──> wait ─────────────┐          claim ──> active ──> finish ──> done
            └─> delayed ─(due)────┘                     │  └────> retry/defer ──> delayed
                                                        ├─(lock deadline passed)──> sweep
                                                        │        ──> wait, or done (stalled)
                                                        └─(its host no longer runs it)──> hand_back
                                                                 ──> head of wait, nothing counted

Every transition of a claimed job carries the claim's lock token; a stale token changes
nothing. Reads (`get`, `list`) are plain pipelined commands: they may see a job mid-move but
never change one.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from dispatch.queue.keys import DEFAULT_PREFIX, QueueKeys, queue_keys, queues_registry
from dispatch.queue.scripts import Arg, Code, checked, load_all, raise_for, script

DAY_MS = 24 * 3_600_000


@dataclass(frozen=True, slots=True)
class Retention:
    keep_done: int = 10_000
    keep_done_ms: int = 7 * DAY_MS
    keep_runs: int = 50_000
    keep_runs_ms: int = 14 * DAY_MS


@dataclass(frozen=True, slots=True)
class NewJob:
    id: str
    data: bytes
    due_ms: int = 0
    delay_ms: int = 0
    dedup: str = ""
    dedup_window_ms: int = 0


@dataclass(frozen=True, slots=True)
class Claim:
    queue: str
    id: str
    token: str
    attempt: int
    stalls: int
    queued_ms: int
    data: bytes


@dataclass(slots=True)
class ClaimBatch:
    now_ms: int
    next_due_ms: int  # 0 when nothing is delayed
    claims: list[Claim] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Finish:
    """One ending of a claim: `finish` (result payload), `retry` or `defer` (defer payload).

    `cancelled`, for a retry or defer, is the result it finishes with instead if an operator's
    cancel request stands for the job when the ending lands (job_finish decides, atomically)."""

    action: str
    id: str
    token: str
    payload: bytes
    delay_ms: int = 0
    run_id: str = ""
    run: bytes = b""
    cancelled: bytes = b""


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: str
    created: bool  # False: a duplicate of the job `id` within its dedup window, or taken
    taken: bool = False  # the id already belongs to another job: nothing was written


class Queue:
    def __init__(
        self,
        redis: Redis,
        name: str,
        prefix: str = DEFAULT_PREFIX,
        retention: Retention | None = None,
    ) -> None:
        self.redis = redis
        self.name = name
        self.prefix = prefix
        self.keys: QueueKeys = queue_keys(name, prefix)
        self.retention = retention or Retention()
        self._registered = False

    async def enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """Add jobs; each answer says created, duplicate (the first job's id) or taken."""
        k = self.keys
        args: list[Arg] = []
        for j in jobs:
            args += [j.id, j.data, j.due_ms, j.delay_ms, j.dedup, j.dedup_window_ms]
        keys = [k.data, k.queued, k.wait, k.delayed, k.dedup, k.dedup_exp, k.done, k.marker]
        out = checked(await script("job_enqueue")(self.redis, keys, args), "enqueue")
        if not self._registered:  # only once the queue really holds something
            await self.redis.sadd(queues_registry(self.prefix), self.name)
            self._registered = True
        return [
            Enqueued(_text(job_id), int(code) == 1, int(code) == Code.CONFLICT)
            for code, job_id in zip(out[::2], out[1::2], strict=True)
        ]

    def _claim_call(self, count: int, host: str, lock_ms: int) -> tuple[list[str], list[Arg]]:
        k = self.keys
        keys = [
            k.wait,
            k.delayed,
            k.active,
            k.data,
            k.lock,
            k.attempts,
            k.stalls,
            k.queued,
            k.marker,
            k.paused,
            k.fence,
        ]
        return keys, [count, host, lock_ms]

    async def claim(self, count: int, host: str, lock_ms: int) -> ClaimBatch:
        keys, args = self._claim_call(count, host, lock_ms)
        return self._claims(await script("job_claim")(self.redis, keys, args))

    def _claims(self, reply: Any) -> ClaimBatch:
        out = checked(reply, "claim")
        batch = ClaimBatch(int(out[0]), int(out[1]))
        for i in range(2, len(out), 6):
            batch.claims.append(
                Claim(
                    self.name,
                    _text(out[i]),
                    _text(out[i + 1]),
                    int(out[i + 2]),
                    int(out[i + 3]),
                    int(out[i + 4]),
                    out[i + 5],
                )
            )
        return batch

    def _finish_call(self, items: Sequence[Finish]) -> tuple[list[str], list[Arg]]:
        k, r = self.keys, self.retention
        keys = [
            k.active,
            k.lock,
            k.delayed,
            k.done,
            k.data,
            k.queued,
            k.attempts,
            k.stalls,
            k.defer,
            k.result,
            k.cancel,
            k.runs,
            k.runs_idx,
            k.marker,
        ]
        args: list[Arg] = [r.keep_done, r.keep_done_ms, r.keep_runs, r.keep_runs_ms]
        for f in items:
            args += [f.action, f.id, f.token, f.delay_ms, f.payload, f.run_id, f.run, f.cancelled]
        return keys, args

    async def finish(self, items: Sequence[Finish]) -> list[bool]:
        """End claims; each answer is False when that claim's lock was lost (True when a retry
        or defer finished as cancelled instead: the claim ended all the same)."""
        keys, args = self._finish_call(items)
        return _ended(checked(await script("job_finish")(self.redis, keys, args), "finish"))

    async def finish_and_claim(
        self, items: Sequence[Finish], count: int, host: str, lock_ms: int
    ) -> tuple[list[bool], ClaimBatch]:
        """Both in one round trip: the hot path of a busy daemon."""
        fkeys, fargs = self._finish_call(items)
        ckeys, cargs = self._claim_call(count, host, lock_ms)
        async with self.redis.pipeline(transaction=False) as pipe:
            script("job_finish").queue(pipe, fkeys, fargs)
            script("job_claim").queue(pipe, ckeys, cargs)
            finished, claimed = await _execute_with_scripts(self.redis, pipe)
        return _ended(checked(finished, "finish")), self._claims(claimed)

    async def extend(
        self, locks: Sequence[tuple[str, str]], lock_ms: int
    ) -> tuple[list[str], list[str]]:
        """Renew locks; return (lost ids, ids with a pending cancel request)."""
        if not locks:
            return [], []
        args: list[Arg] = [lock_ms]
        for job_id, token in locks:
            args += [job_id, token]
        k = self.keys
        reply = checked(
            await script("job_extend")(self.redis, [k.active, k.lock, k.cancel], args), "extend"
        )
        return [_text(x) for x in reply[0]], [_text(x) for x in reply[1]]

    async def sweep(
        self, max_stalls: int, result: bytes, limit: int = 100
    ) -> tuple[list[str], list[str]]:
        """Expired locks: (ids requeued, ids failed as stalled)."""
        k = self.keys
        keys = [k.active, k.lock, k.wait, k.done, k.stalls, k.result, k.marker, k.cancel]
        reply = checked(
            await script("job_sweep")(self.redis, keys, [max_stalls, limit, result]), "sweep"
        )
        return [_text(x) for x in reply[0]], [_text(x) for x in reply[1]]

    async def claims(self) -> list[tuple[str, str]]:
        """Every current claim as (id, lock token), read from the lock hash in one call: cheap
        for an active set of hundreds, which is what a fleet holds."""
        found = await self.redis.hgetall(self.keys.lock)
        return [(_text(job_id), _text(token)) for job_id, token in found.items()]

    async def claims_of(self, host: str) -> list[tuple[str, str]]:
        """The claims whose token `<host>:<n>` names `host` (host names hold no colon)."""
        mine = host + ":"
        return [(job_id, token) for job_id, token in await self.claims() if token.startswith(mine)]

    async def hand_back(self, pairs: Sequence[tuple[str, str]]) -> tuple[list[str], list[str]]:
        """Put claims back at the head of wait at once, spending no attempt and counting no
        stall: (ids handed back, ids left because their attempt already has a run record).

        A claim whose lock moved on is left alone. A recorded one ran to its end: handed back
        it would run again, so its lock is left to lapse and the settled gate ends it."""
        if not pairs:
            return [], []
        args: list[Arg] = [x for pair in pairs for x in pair]
        k = self.keys
        keys = [k.active, k.lock, k.wait, k.marker, k.cancel, k.attempts, k.runs]
        reply = checked(await script("job_handback")(self.redis, keys, args), "hand back")
        return [_text(x) for x in reply[0]], [_text(x) for x in reply[1]]

    async def cancel(self, job_id: str, result: bytes, run_id: str, run: bytes) -> tuple[int, str]:
        """(1, "") cancelled before start; (2, token) running; (3, "") already finished."""
        k = self.keys
        keys = [k.wait, k.delayed, k.active, k.done, k.data, k.lock, k.result, k.runs, k.runs_idx]
        reply = checked(
            await script("job_cancel")(self.redis, keys, [job_id, result, run_id, run]),
            f"cancel {job_id}",
        )
        return int(reply[0]), _text(reply[1]) if len(reply) > 1 else ""

    async def request_cancel(self, job_id: str, token: str, ttl_ms: int) -> None:
        """Raise LockLost when the claim moved on before the request landed."""
        k = self.keys
        code = await script("job_cancel_request")(
            self.redis, [k.lock, k.cancel], [job_id, token, ttl_ms]
        )
        raise_for(int(code), f"cancel {job_id}")

    async def pause(self, mark: str = "1", *, replace: bool = True) -> None:
        """Claim nothing until resumed; `replace=False` leaves a pause already set as it is."""
        await self.redis.set(self.keys.paused, mark, nx=not replace)

    async def unpause(self, mark: str) -> bool:
        """Lift the pause only if it still reads `mark`: a newer pause is left standing."""
        code = await script("queue_unpause")(
            self.redis, [self.keys.paused, self.keys.marker], [mark]
        )
        return int(checked(code, f"unpause {self.name}")) == 1

    async def resume(self) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(self.keys.paused)
            pipe.zadd(self.keys.marker, {"w": 0})
            await pipe.execute()

    async def delayed_for(self, reasons: Container[str], chunk: int = 1000) -> list[str]:
        """Ids of delayed jobs whose latest defer record names one of `reasons`."""
        found: list[str] = []
        ids = [_text(i) for i in await self.redis.zrange(self.keys.delayed, 0, -1)]
        for start in range(0, len(ids), chunk):
            part = ids[start : start + chunk]
            raws = await self.redis.hmget(self.keys.defer, part)
            found += [i for i, raw in zip(part, raws, strict=True) if _reason(raw) in reasons]
        return found

    async def make_due(self, ids: Sequence[str]) -> None:
        """Move delayed jobs to now (only those still delayed: XX) and wake the daemons."""
        if not ids:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(self.keys.delayed, dict.fromkeys(ids, 0), xx=True)
            pipe.zadd(self.keys.marker, {"w": 0})
            await pipe.execute()

    async def wake(self) -> None:
        """Nudge a daemon blocked on this queue's marker."""
        await self.redis.zadd(self.keys.marker, {"w": 0})


def _ended(codes: Sequence[Any]) -> list[bool]:
    return [int(c) > 0 for c in codes]


async def _execute_with_scripts(redis: Redis, pipe: Any) -> list[Any]:
    """Run a pipeline of EVALSHA calls, loading the scripts once if the server lacks them."""
    commands = list(pipe.command_stack)
    try:
        return list(await pipe.execute())
    except NoScriptError:
        await load_all(redis)
        pipe.command_stack = commands
        return list(await pipe.execute())


class _Reason(msgspec.Struct):
    reason: str = ""


def _reason(raw: bytes | str | None) -> str:
    if raw is None:
        return ""
    try:
        return msgspec.json.decode(raw, type=_Reason).reason
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
