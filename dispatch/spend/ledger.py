"""The spend ledgers in Redis: reserve (lua/budget_reserve.lua), settle or refund
(lua/budget_settle.lua), and settle what a lost run left open.

A reservation is named by its claim, `<queue>|<job>|<attempt>|<token>`: a job's attempt may be
claimed twice (a stall does not spend an attempt), its claim never. Its record (counter key ->
metric, amount, expiry) is what settles it, so a run that ends after midnight is charged to the
windows it reserved in. The record is deleted in the same script call that charges it: whoever
closes first (the run's own settle, a refund, the sweep's settle of a lost run) is the only
one that counts.

Closing never holds up a job: `Reservation.close` hands the script call to a background task
that retries a Redis fault with backoff and then gives up (logged). A reservation left open
that way, or by a daemon that died, is settled at its reserved amount by `settle_lost`, which
each daemon runs once per sweep period over every open reservation of the fleet, in pages of
`LOST_BATCH`: one whose claim no longer holds its job's lock, or holds it past the lock's
deadline (a dead host's own queue, `jobs@<host>`, is swept by nobody), seen so on two looks in a
row (the run's own settle, retrying, has had a sweep period to land first).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from redis.asyncio import Redis
from redis.exceptions import RedisError

from dispatch.errors import RedisUnavailable
from dispatch.log import event
from dispatch.queue.connect import with_time
from dispatch.queue.keys import DEFAULT_PREFIX, budget_keys, queue_keys
from dispatch.queue.scripts import Arg, checked, script
from dispatch.spend.plan import MARGIN_MS, Counter

Mode = Literal["settle", "refund"]
RECORD_TTL_MS = MARGIN_MS  # an unsettled record outlives the longest run past its window
CLOSE_TIMEOUT_S = 5.0
RETRY_S = (0.5, 1.0, 2.0, 4.0, 8.0)
LOST_BATCH = 500
_FAULTS = (RedisError, RedisUnavailable, OSError, TimeoutError)


def reservation_id(queue: str, job_id: str, attempt: int, token: str) -> str:
    return f"{queue}|{job_id}|{attempt}|{token}"


@dataclass(frozen=True, slots=True)
class Blocked:
    """The counter that said no, and how: over its `cap`, or inside its `soft` band."""

    counter: Counter
    kind: Literal["cap", "soft"]
    used: int
    held: int


@dataclass(eq=False)
class Reservation:
    rid: str
    counters: tuple[Counter, ...]
    ledger: SpendLedger
    closed: bool = False

    @property
    def usd_micro(self) -> int:
        """The dollars reserved (the job's cap), in micro-dollars; 0 when none."""
        return max((c.amount for c in self.counters if c.metric == "usd"), default=0)

    def close(self, mode: Mode, usd_micro: int = -1, tokens: int = 0) -> None:
        """Settle (the run happened) or refund (it never started), once, in the background."""
        if not self.closed:
            self.closed = True
            self.ledger.close_later(
                self.rid, [c.key for c in self.counters], mode, usd_micro, tokens
            )

    def release(self) -> None:
        """The hold's release: a reservation no run settled is given back."""
        self.close("refund")


@dataclass
class SpendLedger:
    redis: Redis
    prefix: str = DEFAULT_PREFIX
    retry_s: Sequence[float] = RETRY_S
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _suspects: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.keys = budget_keys(self.prefix)

    async def reserve(self, rid: str, counters: Sequence[Counter], urgent: bool) -> Any:
        """A `Reservation`, or `Blocked` naming the counter that refused; one script call."""
        keys = [self.keys.reservation(rid), self.keys.open, *(c.key for c in counters)]
        args: list[Arg] = [rid, RECORD_TTL_MS, int(urgent)]
        for c in counters:
            args += [c.metric, c.amount, c.cap, c.soft, c.expire_at_ms]
        reply = checked(await script("budget_reserve")(self.redis, keys, args), "budget reserve")
        if int(reply[0]) != 0:
            return Reservation(rid, tuple(counters), self)
        counter = counters[int(reply[1]) - 1]
        used, held = int(reply[3]), int(reply[4])
        if _text(reply[2]) == "cap":
            return Blocked(counter, "cap", used, held)
        return Blocked(counter, "soft", used, held)

    async def close_now(
        self, rid: str, counter_keys: Sequence[str], mode: Mode, usd: int = -1, tokens: int = 0
    ) -> bool:
        """One settle or refund; True when this call closed it, False when already closed."""
        keys = [self.keys.reservation(rid), self.keys.open, *counter_keys]
        reply = await script("budget_settle")(self.redis, keys, [rid, mode, usd, tokens])
        return bool(checked(reply, f"budget {mode}"))

    def close_later(
        self, rid: str, counter_keys: Sequence[str], mode: Mode, usd: int, tokens: int
    ) -> None:
        task = asyncio.get_running_loop().create_task(
            self._close_retrying(rid, counter_keys, mode, usd, tokens)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _close_retrying(
        self, rid: str, counter_keys: Sequence[str], mode: Mode, usd: int, tokens: int
    ) -> None:
        for pause in (*self.retry_s, None):
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    closed = await self.close_now(rid, counter_keys, mode, usd, tokens)
                event(
                    "budget_closed",
                    reservation=rid,
                    mode=mode,
                    usd_micro=usd,
                    tokens=tokens,
                    already=not closed,
                )
                return
            except _FAULTS as exc:
                event(
                    "budget_close_retry",
                    reservation=rid,
                    mode=mode,
                    error=str(exc) or type(exc).__name__,
                    in_s=pause,
                )
            if pause is None:  # the sweep settles it at the reserved amount
                event("budget_close_abandoned", reservation=rid, mode=mode)
                return
            await asyncio.sleep(pause)

    async def drain(self, timeout_s: float = 10.0) -> None:
        """Let background closes finish (shutdown, tests); stragglers are left to the sweep."""
        if self._tasks:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await asyncio.gather(*self._tasks, return_exceptions=True)

    async def settle_lost(self) -> list[str]:
        """Settle, at the reserved amount, the open reservations of every queue whose claims
        were gone on this look and the one before; the ids settled."""
        gone: set[str] = set()
        after = "-"
        while True:
            members = await self.redis.zrangebylex(
                self.keys.open, after, "+", start=0, num=LOST_BATCH
            )
            rids = [_text(m) for m in members]
            gone |= await self._gone(rids)
            if len(rids) < LOST_BATCH:
                break
            after = f"({rids[-1]}"
        ripe = sorted(gone & self._suspects)
        self._suspects = gone
        settled = [rid for rid in ripe if await self._settle_one(rid)]
        if settled:
            event("budget_lost_settled", reservations=settled)
        return settled

    async def _gone(self, rids: list[str]) -> set[str]:
        """Of `rids`, those whose claim does not hold its lock, or holds it past its deadline.
        Read after the listing: a claim that does not hold its lock now never will again."""
        by_queue: dict[str, list[tuple[str, str, str]]] = {}
        for rid in rids:
            parts = rid.split("|")
            if len(parts) == 4:  # a name of another shape is nothing this ledger reserved
                by_queue.setdefault(parts[0], []).append((rid, parts[1], parts[3]))
        if not by_queue:
            return set()
        async with self.redis.pipeline(transaction=False) as pipe:
            for queue, held in by_queue.items():
                k = queue_keys(queue, self.prefix)
                pipe.hmget(k.lock, [job for _, job, _ in held])
                pipe.zmscore(k.active, [job for _, job, _ in held])
            (seconds, micros), replies = await with_time(self.redis, pipe)
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        gone: set[str] = set()
        for n, held in enumerate(by_queue.values()):
            locks, deadlines = replies[2 * n], replies[2 * n + 1]
            for (rid, _, token), lock, deadline in zip(held, locks, deadlines, strict=True):
                if _text(lock) != token or (deadline is not None and deadline < now_ms):
                    gone.add(rid)
        return gone

    async def _settle_one(self, rid: str) -> bool:
        counter_keys = [_text(k) for k in await self.redis.hkeys(self.keys.reservation(rid))]
        self._suspects.discard(rid)
        return await self.close_now(rid, counter_keys, "settle")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else "" if value is None else str(value)
