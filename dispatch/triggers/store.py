"""What the fleet keeps of its triggers in Redis (keys spelled in `dispatch.queue.keys`).

    trigger_state   HASH per trigger: `paused` ("<iso> <host>", `dispatch trigger pause`),
                    `disabled` (why the stall guard stopped it), `since` (ms: only jobs of
                    occurrences after it count for the stall guard), `skipped` (a count),
                    `last_skip`, `caught_up` (the last catch-up, in words)
    trigger_minted  ZSET "<job id> <queue> <sig>" -> occurrence ms, the newest `KEEP` kept:
                    the pending occurrences (instant ahead) and the history
    registry        SET of trigger ids that minted, so one removed from the file is found
    seen            STRING the last minting round's epoch ms, read and written in one SET GET

Plain commands only: what makes one job per occurrence is its deterministic id and dedup key
in `job_enqueue`, not the order of these writes. Every write here is idempotent, so two hosts
minting the same occurrence write the same things.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from redis.asyncio import Redis

from dispatch.model import Result
from dispatch.queue import keys
from dispatch.queue.transitions import NewJob, Queue

KEEP = 200  # minted entries kept per trigger: the pending ones and enough history
RETIRED_TTL_S = 30 * 86_400  # a removed trigger's history, for `why` on its old jobs
# a dedup key holds while its job is unfinished whatever the window; past that, the job's id
# (kept with its result) is what refuses a second mint of the same occurrence
DEDUP_WINDOW_MS = 86_400_000
_results = msgspec.json.Decoder(Result)


@dataclass(frozen=True)
class Minted:
    job_id: str
    queue: str
    sig: str  # the trigger's signature when minted; "run" for `dispatch trigger run`
    at_ms: int

    @property
    def member(self) -> str:
        return f"{self.job_id} {self.queue} {self.sig}"

    @classmethod
    def parse(cls, member: bytes | str, score: float) -> Minted | None:
        parts = _text(member).split(" ")
        return cls(parts[0], parts[1], parts[2], int(score)) if len(parts) == 3 else None


@dataclass
class TriggerState:
    paused: str = ""
    disabled: str = ""
    since_ms: int = 0
    skipped: int = 0
    last_skip: str = ""
    caught_up: str = ""
    future: list[Minted] = field(default_factory=list)  # minted, occurrence still ahead

    @classmethod
    def of(cls, fields: dict[Any, Any], future: list[Minted]) -> TriggerState:
        f = {_text(k): _text(v) for k, v in fields.items()}
        return cls(
            f.get("paused", ""),
            f.get("disabled", ""),
            int(f.get("since") or 0),
            int(f.get("skipped") or 0),
            f.get("last_skip", ""),
            f.get("caught_up", ""),
            future,
        )


class TriggerStore:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix

    def queue(self, name: str) -> Queue:
        return Queue(self.redis, name, self.prefix)

    async def states(self, ids: Sequence[str], now_ms: int) -> dict[str, TriggerState]:
        """Every trigger's state and pending occurrences: one round trip."""
        async with self.redis.pipeline(transaction=False) as p:
            for tid in ids:
                p.hgetall(keys.trigger_state(tid, self.prefix))
                p.zrangebyscore(
                    keys.trigger_minted(tid, self.prefix), f"({now_ms}", "+inf", withscores=True
                )
            replies = await p.execute()
        return {
            tid: TriggerState.of(replies[2 * i], _minted(replies[2 * i + 1]))
            for i, tid in enumerate(ids)
        }

    async def registry(self) -> set[str]:
        return {_text(x) for x in await self.redis.smembers(keys.triggers_registry(self.prefix))}

    async def mark_seen(self, now_ms: int) -> int | None:
        """Record this round; the previous round's instant, None for the fleet's first."""
        before = await self.redis.set(keys.triggers_seen(self.prefix), now_ms, get=True)
        return int(before) if before else None

    async def mint(self, tid: str, m: Minted, raw: bytes, due_ms: int, dedup: str) -> str:
        """Enqueue, then note: "created", "duplicate" (another host was first) or "taken"."""
        new = NewJob(m.job_id, raw, due_ms, 0, dedup, DEDUP_WINDOW_MS)
        done = (await self.queue(m.queue).enqueue([new]))[0]
        async with self.redis.pipeline(transaction=False) as p:
            p.zadd(keys.trigger_minted(tid, self.prefix), {m.member: m.at_ms})
            p.zremrangebyrank(keys.trigger_minted(tid, self.prefix), 0, -KEEP - 1)
            p.sadd(keys.triggers_registry(self.prefix), tid)
            await p.execute()
        return "created" if done.created else "taken" if done.taken else "duplicate"

    async def withdraw(self, tid: str, m: Minted, dedup: str) -> bool:
        """Take a pending occurrence back; it leaves the minted set either way."""
        withdrawn = await self.queue(m.queue).withdraw(m.job_id, dedup)
        await self.redis.zrem(keys.trigger_minted(tid, self.prefix), m.member)
        return withdrawn

    async def between(self, tid: str, after_ms: int, until_ms: int) -> list[Minted]:
        """Minted occurrences in (after_ms, until_ms], oldest first."""
        found = await self.redis.zrangebyscore(
            keys.trigger_minted(tid, self.prefix), f"({after_ms}", until_ms, withscores=True
        )
        return _minted(found)

    async def recent(self, tid: str, until_ms: int, most: int) -> list[Minted]:
        """The newest minted at or before `until_ms`, newest first."""
        found = await self.redis.zrevrangebyscore(
            keys.trigger_minted(tid, self.prefix), until_ms, "-inf", 0, most, withscores=True
        )
        return _minted(found)

    async def results(self, minted: Sequence[Minted]) -> list[Result | None]:
        """Each job's final result; None while it has none (or it is gone)."""
        async with self.redis.pipeline(transaction=False) as p:
            for m in minted:
                p.hget(keys.queue_keys(m.queue, self.prefix).result, m.job_id)
            raws = await p.execute()
        return [_result(raw) for raw in raws]

    async def untouched(self, minted: Sequence[Minted]) -> list[bool]:
        """Whether each job still waits in `delayed` with no pickup behind it."""
        async with self.redis.pipeline(transaction=False) as p:
            for m in minted:
                k = keys.queue_keys(m.queue, self.prefix)
                p.zscore(k.delayed, m.job_id)
                p.hexists(k.defer, m.job_id)
                p.hexists(k.attempts, m.job_id)
            r = await p.execute()
        return [r[i] is not None and not r[i + 1] and not r[i + 2] for i in range(0, len(r), 3)]

    async def live(self, m: Minted) -> bool:
        """Whether the job still waits or runs (known, and not finished)."""
        return (await self.lives([m]))[0]

    async def lives(self, minted: Sequence[Minted]) -> list[bool]:
        """`live` for each, in one round trip."""
        async with self.redis.pipeline(transaction=False) as p:
            for m in minted:
                k = keys.queue_keys(m.queue, self.prefix)
                p.hexists(k.data, m.job_id)
                p.zscore(k.done, m.job_id)
            r = await p.execute()
        return [bool(r[i]) and r[i + 1] is None for i in range(0, len(r), 2)]

    async def set_fields(self, tid: str, **fields: str | int) -> None:
        await self.redis.hset(keys.trigger_state(tid, self.prefix), mapping=_mapping(fields))

    async def drop_fields(self, tid: str, *names: str) -> None:
        await self.redis.hdel(keys.trigger_state(tid, self.prefix), *names)

    async def note_skipped(self, tid: str, count: int, what: str) -> None:
        async with self.redis.pipeline(transaction=False) as p:
            p.hincrby(keys.trigger_state(tid, self.prefix), "skipped", count)
            p.hset(keys.trigger_state(tid, self.prefix), "last_skip", what)
            await p.execute()

    async def retire(self, tid: str) -> None:
        """A trigger gone from the file with nothing pending: its history expires."""
        async with self.redis.pipeline(transaction=False) as p:
            p.srem(keys.triggers_registry(self.prefix), tid)
            p.expire(keys.trigger_state(tid, self.prefix), RETIRED_TTL_S)
            p.expire(keys.trigger_minted(tid, self.prefix), RETIRED_TTL_S)
            await p.execute()


def _mapping(fields: dict[str, str | int]) -> dict[Any, Any]:
    return dict(fields)  # redis-py's Mapping type is invariant in its keys


def _minted(pairs: Sequence[Any]) -> list[Minted]:
    return [m for member, score in pairs if (m := Minted.parse(member, score)) is not None]


def _result(raw: bytes | None) -> Result | None:
    if not raw:
        return None
    try:
        return _results.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
