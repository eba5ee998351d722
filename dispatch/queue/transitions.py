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

Faults. Every method raises a Redis fault (an error reply such as READONLY, a timeout, a lost
connection) as `QueueFault`, a `RedisUnavailable` with redis-py's error as its cause
(queue/faults.py), so the daemon catches one type; a script's own answers keep theirs
(`LockLost`, `NotFound`, `Conflict`, `BadCall`), and a server that lost its scripts (NOSCRIPT)
is given them again inside the call.

Bad calls. Every script checks its key count and every argument (plain-digit integers within
bounds, ids and tokens of their shape, JSON fields shaped as objects, at most `MAX_ITEMS` items)
before its first write, and answers -4 otherwise, having changed nothing. The wrappers raise
`BadCall` for it: a bug or bad input, never a Redis fault, so nothing retries it as one.

Retention. Finished jobs and mirrored runs past their count or age go on every finish call of
`SMALL_CALL` jobs or more and on every third smaller one (`RETENTION_EVERY`), so a busy
daemon's many small calls do not each pay for the checks; a call that skips it is followed,
within two, by one that trims.

Batches. A script takes at most `MAX_ITEMS` jobs or claims per call; `enqueue`, `finish`,
`extend` and `hand_back` split a longer list into calls of that size, in order. Each call is
atomic; the batch as a whole is not. A failure in a later call of `enqueue` raises
`EnqueueIncomplete`, carrying the answers of the calls that landed and the jobs not written
(a failure in the first call raises as it is: nothing was written). `finish` raises the
failing call's error as is: the calls before it ended their claims, and sending the whole
batch again is safe, because those claims are fenced and answer lock-lost, writing nothing.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any, TypeVar

import msgspec
from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from dispatch.queue.faults import queue_call
from dispatch.queue.items import (
    MAX_ITEMS,
    Action,
    Claim,
    ClaimBatch,
    Enqueued,
    EnqueueIncomplete,
    Finish,
    NewJob,
    Retention,
    enqueue_call,
    enqueued,
)
from dispatch.queue.keys import DEFAULT_PREFIX, QueueKeys, queue_keys, queues_registry
from dispatch.queue.scripts import Arg, Code, checked, load_all, raise_for, script
from dispatch.queue.wire import Command, send_all

__all__ = [
    "MAX_ITEMS",
    "Action",
    "Claim",
    "ClaimBatch",
    "EnqueueIncomplete",
    "Enqueued",
    "Finish",
    "NewJob",
    "Queue",
    "Retention",
]
T = TypeVar("T")
# Retention runs on every finish call of SMALL_CALL jobs or more, and on every third smaller
# one: its checks are a fifth of a small call's Redis commands, and each trim takes up to 200
# of each kind, more than three small calls end.
SMALL_CALL = 50
RETENTION_EVERY = 3


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
        self._finish_calls = 0

    async def enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """Add jobs; each answer says created, duplicate (the first job's id) or taken.
        More than `MAX_ITEMS` go in several atomic calls (see the module docstring)."""
        done: list[Enqueued] = []
        for start in range(0, len(jobs), MAX_ITEMS):
            try:
                done += await self._enqueue(jobs[start : start + MAX_ITEMS])
            except Exception as exc:
                if not done:
                    raise
                raise EnqueueIncomplete(
                    f"enqueue: {len(done)} of {len(jobs)} jobs answered, then {exc}",
                    done,
                    list(jobs[start:]),
                ) from exc
        return done

    async def _enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        keys, args = enqueue_call(self.keys, jobs)
        with queue_call("enqueue"):
            out = checked(await script("job_enqueue")(self.redis, keys, args), "enqueue")
            if not self._registered:  # only once the queue really holds something
                await self.redis.sadd(queues_registry(self.prefix), self.name)
                self._registered = True
        return enqueued(out)

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
        with queue_call("claim"):
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
        self._finish_calls += 1
        args: list[Arg] = ["", "", "", ""]  # no retention this call
        if len(items) >= SMALL_CALL or self._finish_calls % RETENTION_EVERY == 1:
            args = [r.keep_done, r.keep_done_ms, r.keep_runs, r.keep_runs_ms]
        for f in items:
            args += [f.action, f.id, f.token, f.delay_ms, f.payload, f.run_id, f.run, f.cancelled]
        return keys, args

    async def finish(self, items: Sequence[Finish]) -> list[bool]:
        """End claims; each answer is False when that claim's lock was lost (True when a retry
        or defer finished as cancelled instead: the claim ended all the same). More than
        `MAX_ITEMS` go in several atomic calls (see the module docstring)."""
        ended: list[bool] = []
        for part in _parts(items):
            keys, args = self._finish_call(part)
            with queue_call("finish"):
                reply = await script("job_finish")(self.redis, keys, args)
            ended += _ended(checked(reply, "finish"))
        return ended

    async def finish_and_claim(
        self, items: Sequence[Finish], count: int, host: str, lock_ms: int
    ) -> tuple[list[bool], ClaimBatch]:
        """Both in one round trip: the hot path of a busy daemon. Past `MAX_ITEMS` endings,
        the first ones go ahead in calls of their own."""
        split = max(len(items) - MAX_ITEMS, 0)
        head = await self.finish(items[:split]) if split else []
        items = items[split:]
        fkeys, fargs = self._finish_call(items)
        ckeys, cargs = self._claim_call(count, host, lock_ms)
        commands = [
            script("job_finish").command(fkeys, fargs),
            script("job_claim").command(ckeys, cargs),
        ]
        with queue_call("finish and claim"):
            finished, claimed = await _send_scripts(self.redis, commands)
        batch = self._claims(claimed)
        if finished == Code.BAD_INPUT:  # the claims the refused call came with go back at once
            await self.hand_back([(c.id, c.token) for c in batch.claims])
        return head + _ended(checked(finished, "finish")), batch

    async def extend(
        self, locks: Sequence[tuple[str, str]], lock_ms: int
    ) -> tuple[list[str], list[str]]:
        """Renew locks; return (lost ids, ids with a pending cancel request)."""
        lost: list[str] = []
        cancels: list[str] = []
        k = self.keys
        for part in _parts(locks):
            args: list[Arg] = [lock_ms, *(x for pair in part for x in pair)]
            with queue_call("extend"):
                reply = await script("job_extend")(self.redis, [k.active, k.lock, k.cancel], args)
            reply = checked(reply, "extend")
            lost += [_text(x) for x in reply[0]]
            cancels += [_text(x) for x in reply[1]]
        return lost, cancels

    async def sweep(
        self, max_stalls: int, result: bytes, limit: int = 100
    ) -> tuple[list[str], list[str]]:
        """Expired locks: (ids requeued, ids failed as stalled)."""
        k = self.keys
        keys = [k.active, k.lock, k.wait, k.done, k.stalls, k.result, k.marker, k.cancel]
        with queue_call("sweep"):
            reply = await script("job_sweep")(self.redis, keys, [max_stalls, limit, result])
        reply = checked(reply, "sweep")
        return [_text(x) for x in reply[0]], [_text(x) for x in reply[1]]

    async def claims(self) -> list[tuple[str, str]]:
        """Every current claim as (id, lock token), read from the lock hash in one call: cheap
        for an active set of hundreds, which is what a fleet holds."""
        with queue_call("claims"):
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
        back: list[str] = []
        recorded: list[str] = []
        k = self.keys
        keys = [k.active, k.lock, k.wait, k.marker, k.cancel, k.attempts, k.runs]
        for part in _parts(pairs):
            args: list[Arg] = [x for pair in part for x in pair]
            with queue_call("hand back"):
                reply = await script("job_handback")(self.redis, keys, args)
            reply = checked(reply, "hand back")
            back += [_text(x) for x in reply[0]]
            recorded += [_text(x) for x in reply[1]]
        return back, recorded

    async def cancel(self, job_id: str, result: bytes, run_id: str, run: bytes) -> tuple[int, str]:
        """(1, "") cancelled before start; (2, token) running; (3, "") already finished."""
        k = self.keys
        keys = [k.wait, k.delayed, k.active, k.done, k.data, k.lock, k.result, k.runs, k.runs_idx]
        with queue_call(f"cancel {job_id}"):
            reply = await script("job_cancel")(self.redis, keys, [job_id, result, run_id, run])
        reply = checked(reply, f"cancel {job_id}")
        return int(reply[0]), _text(reply[1]) if len(reply) > 1 else ""

    async def withdraw(self, job_id: str, dedup: str = "") -> bool:
        """Take back a delayed job no one has claimed, freeing its id and dedup key; False
        when it is not delayed or was claimed before (it is left as it is)."""
        k = self.keys
        keys = [k.delayed, k.data, k.queued, k.defer, k.attempts, k.dedup, k.dedup_exp]
        with queue_call(f"withdraw {job_id}"):
            reply = await script("job_withdraw")(self.redis, keys, [job_id, dedup])
        return int(checked(reply, f"withdraw {job_id}")) == 1

    async def request_cancel(self, job_id: str, token: str, ttl_ms: int) -> None:
        """Raise LockLost when the claim moved on before the request landed."""
        k = self.keys
        with queue_call(f"cancel request {job_id}"):
            code = await script("job_cancel_request")(
                self.redis, [k.lock, k.cancel], [job_id, token, ttl_ms]
            )
        raise_for(int(code), f"cancel {job_id}")

    async def pause(self, mark: str = "1", *, replace: bool = True) -> None:
        """Claim nothing until resumed; `replace=False` leaves a pause already set as it is."""
        with queue_call(f"pause {self.name}"):
            await self.redis.set(self.keys.paused, mark, nx=not replace)

    async def unpause(self, mark: str) -> bool:
        """Lift the pause only if it still reads `mark`: a newer pause is left standing."""
        with queue_call(f"unpause {self.name}"):
            code = await script("queue_unpause")(
                self.redis, [self.keys.paused, self.keys.marker], [mark]
            )
        return int(checked(code, f"unpause {self.name}")) == 1

    async def resume(self) -> None:
        with queue_call(f"resume {self.name}"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.delete(self.keys.paused)
                pipe.zadd(self.keys.marker, {"w": 0})
                await pipe.execute()

    async def delayed_for(self, reasons: Container[str], chunk: int = 1000) -> list[str]:
        """Ids of delayed jobs whose latest defer record names one of `reasons`."""
        found: list[str] = []
        with queue_call(f"delayed of {self.name}"):
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
        with queue_call(f"make due in {self.name}"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.zadd(self.keys.delayed, dict.fromkeys(ids, 0), xx=True)
                pipe.zadd(self.keys.marker, {"w": 0})
                await pipe.execute()

    async def wake(self) -> None:
        """Nudge a daemon blocked on this queue's marker."""
        with queue_call(f"wake {self.name}"):
            await self.redis.zadd(self.keys.marker, {"w": 0})

    async def take_marker(self, blocking: Redis, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for this queue's marker and take it (BZPOPMIN): True when a
        wake-up was taken. On `blocking`, a client of its own: the wait holds a connection."""
        with queue_call(f"marker of {self.name}"):
            return bool(await blocking.bzpopmin(self.keys.marker, timeout_s))


def _parts(items: Sequence[T]) -> list[Sequence[T]]:
    """Consecutive slices of at most `MAX_ITEMS`: one script call each."""
    return [items[i : i + MAX_ITEMS] for i in range(0, len(items), MAX_ITEMS)]


def _ended(codes: Sequence[Any]) -> list[bool]:
    return [int(c) > 0 for c in codes]


async def _send_scripts(redis: Redis, commands: list[Command]) -> list[Any]:
    """EVALSHA calls in one round trip (`wire.send_all`). A call the server had no script for
    runs again once the scripts are loaded, and only that call: the others ran (a claim among
    them took jobs)."""
    results = await send_all(redis, commands)
    missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
    if missing:
        await load_all(redis)
        again = await send_all(redis, [commands[i] for i in missing])
        for i, result in zip(missing, again, strict=True):
            results[i] = result
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results


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
