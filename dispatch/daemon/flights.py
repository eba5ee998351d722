"""The flush side of a lane: endings sent to Redis in flights, each with the lane's next claim.

A job's ending waits in `pending` (its slot still held: capacity.py) until the flusher sends it.
A flight ends finished claims in one script call together with the next claim (one round trip
per batch: `Queue.finish_and_claim`), and appends their run records to the local log in one
write. Two flights may be under way at once (`MAX_FLIGHTS`): on a host of many slots its jobs
run in two cohorts (`Capacity.batch`), each ended while the other runs. A flight carries one
cohort's endings at most, and their slots go to the claim it carries; it begins the lane's held
cohort as its call goes on the wire (daemon/lane.py).

A flight is a claim call too: it is counted as one from the moment its endings are taken
(`Lane.call_begins`) until its reply is read (`Lane.call_ends`), so `Lane.recover` never takes
its claims for lost ones while it is in the air, and a fault on it leaves the lane unsure, as
a failed claim does. What it claimed is handed to the claim side (`Lane.accept`).

Faults. A Redis fault puts the endings back at the head of `pending` (their local records are
written already) and the flight is tried again after `FINISH_RETRY_S`: a finish that cannot be
sent stays pending until Redis answers. Its claim is no longer renewed (Redis would not take
the renewal either): if the outage outlasted the lock and a sweep put the job back first, the
finish is refused and its run's outcome is mirrored instead, for the re-pickup to settle on
(`_keep_outcomes`). A local log that cannot be written is logged and skipped: the finish carries
the record to Redis all the same. A call a script refuses (`BadCall`: a bug, not a fault) is
logged and not retried as it was: the batch goes again in halves, down to the items refused
alone, so one bad item never takes its batch with it. Those are dropped, and their claims lapse
and are swept, a stall each, so a bug that repeats is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from dispatch.clock import Clock
from dispatch.config.settings import Settings
from dispatch.daemon.capacity import Capacity
from dispatch.daemon.tasks import Lifecycle
from dispatch.errors import BadCall, RedisUnavailable
from dispatch.log import event
from dispatch.queue.faults import redis_call
from dispatch.queue.transitions import ClaimBatch, Finish, Queue
from dispatch.records.disk_log import RecordLog
from dispatch.records.mirror import record_runs

FINISH_RETRY_S = 0.5
KEEP_EVERY_S = 1.0  # a blocked outcome is tried again this often (the settled gate waits 3 s)
KEEP_TRIES = 3
MAX_FLIGHTS = 2  # finish-and-claim calls of one lane under way at once
GATHER_S = 0.025  # longest a claiming-ahead lane's endings wait to fill a cohort (FAST_RUN_S)
Ending = tuple[Finish, bytes | None]  # a finish, and its record for the local log if not there
Kept = tuple[str, str, str, bytes]  # job id, fencing token, run id, record
Forget = Callable[[str, Sequence[str]], Awaitable[None]]  # a queue's finished jobs' wait states


class ClaimSide(Protocol):
    """What the flights read and call of their lane's claim side (daemon/lane.py's `Lane`)."""

    queue: Queue
    settings: Settings
    capacity: Capacity
    life: Lifecycle
    clock: Clock
    wake: asyncio.Event
    unsure: bool
    live: int

    @property
    def name(self) -> str: ...

    def accept(self, batch: ClaimBatch, want: int, sent: float) -> None: ...

    def begin_held(self) -> None: ...

    def call_begins(self) -> None: ...

    def call_ends(self) -> None: ...


class Flights:
    """One lane's endings on their way to Redis; `len()` is the flights under way now."""

    def __init__(self, lane: ClaimSide, records: RecordLog, forget: Forget | None = None) -> None:
        self.lane = lane  # the claim side: its queue, capacity and settings are read from it
        self.records = records
        self.forget = forget
        self.pending: list[Ending] = []
        self.flush_now = asyncio.Event()
        self.under_way: set[asyncio.Task[None]] = set()
        self.keeping: set[asyncio.Task[None]] = set()  # refused outcomes tried again
        # jobs whose wait state goes once their finish lands (gates/wait/state.py)
        self.waited: set[str] = set()
        self._gather: asyncio.TimerHandle | None = None  # set while endings wait for a cohort
        self._gathered = False  # they waited GATHER_S: the next flight leaves with what it has

    def __len__(self) -> int:
        return len(self.under_way)

    def add(self, finish: Finish, run_json: bytes | None) -> None:
        self.pending.append((finish, run_json))
        self.flush_now.set()

    async def flusher(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.lane.life.closing:
            await self.flush_now.wait()
            self.flush_now.clear()
            # A flight carries one cohort's endings at most, taken now: endings of two cohorts
            # that met here go out as two flights, each claiming one cohort again.
            while self.pending and len(self.under_way) < MAX_FLIGHTS and not self._gathering():
                flight = loop.create_task(self._flight(self._next_cohort()))
                self.under_way.add(flight)
                flight.add_done_callback(self.under_way.discard)

    def _gathering(self) -> bool:
        """While its host claims ahead (capacity.py), a lane's flight leaves with a whole
        cohort of endings, or once none of its runs is under way, or `GATHER_S` after it began
        to wait: a cohort split by the run slots would otherwise fly as two small calls."""
        capacity = self.lane.capacity
        if (
            self._gathered
            or not capacity.ahead
            or len(self.pending) >= capacity.batch
            or self.lane.live <= 0
        ):
            return False
        if self._gather is None:
            self._gather = asyncio.get_running_loop().call_later(GATHER_S, self._gather_ends)
        return True

    def _gather_ends(self) -> None:
        self._gathered = True
        self.flush_now.set()

    def _next_cohort(self) -> list[Ending]:
        """Endings for one call, counted as a call under way from now (`Lane.recover`)."""
        if self._gather is not None:
            self._gather.cancel()
            self._gather = None
        self._gathered = False
        batch = self.pending[: max(self.lane.capacity.batch, 1)]
        del self.pending[: len(batch)]
        self.lane.call_begins()  # _send counts it down
        return batch

    async def _flight(self, batch: list[Ending]) -> None:
        try:
            await self._send(batch)
        except Exception as exc:  # a bug (faults are handled in _send): said, never silent
            event(
                "task_failed", task=f"flush:{self.lane.name}", error=f"{type(exc).__name__}: {exc}"
            )
        finally:
            # Counted out before the flusher is woken: it runs before this task's done
            # callbacks, and two flights landing in one step would otherwise find both still
            # under way and launch nothing, leaving what ended meanwhile for another ending.
            self.under_way.discard(asyncio.current_task())
            if self.pending:  # what ended meanwhile goes next
                self.flush_now.set()

    async def landed(self, timeout_s: float) -> None:
        """Wait for the flushes under way (shutdown, before the last ones)."""
        if self.under_way:
            await asyncio.wait(set(self.under_way), timeout=timeout_s)

    async def flush(self) -> None:
        """Send one cohort of the pending endings now (shutdown, tests)."""
        await self._send(self._next_cohort())

    async def _send(self, batch: list[Ending]) -> None:
        """One call for `batch`, counted as a claim call under way (`_next_cohort`) until what
        it claimed is the lane's: `recover`, which looks only while no call is under way, must
        not take those claims for lost while the refused outcomes are kept first."""
        try:
            unsent = await self._call(batch)
        finally:
            self.lane.call_ends()
        if unsent:  # Redis did not answer: the endings wait a moment, then go again
            await self.lane.life.stopped_within(FINISH_RETRY_S)
            self.flush_now.set()

    async def _call(self, batch: list[Ending]) -> bool:
        """Finish `batch` (and claim what its room allows); True when it went back to pending."""
        lane = self.lane
        self._write_local(run for _, run in batch if run)
        items = [finish for finish, _ in batch]
        want = lane.capacity.take(lane.life.draining, freed=len(items))
        sent = lane.clock.monotonic()
        try:
            # A held cohort begins once this call is on the wire: its tasks run after this
            # step, which writes the call before its first wait.
            lane.begin_held()
            if want:
                oks, claimed = await lane.queue.finish_and_claim(
                    items, want, lane.settings.host, lane.settings.lock_ms
                )
            else:
                oks, claimed = await lane.queue.finish(items), None
        except RedisUnavailable as exc:
            if want > 0:
                lane.unsure = True  # the claim it carried may have run, its reply lost
            lane.capacity.adjust(want - len(items))  # back as it was: the endings hold theirs
            self.pending[:0] = [(f, None) for f in items]  # the local record is already written
            event("redis_error", during="finish", error=str(exc))
            return True
        except BadCall as exc:  # the rest of the batch goes again, without the bad items
            lane.capacity.give(want)
            return await self._without_bad(items, exc)
        refused = [item for item, ok in zip(items, oks, strict=True) if not ok]
        if refused:  # before the new claims start: one of them may be a refused job again
            await self._keep_outcomes(refused, claimed)
        self._settle(items, oks, claimed, want, sent)
        await self._forget_waits(items, oks)
        return False

    async def _without_bad(self, items: list[Finish], exc: BadCall) -> bool:
        """A batch refused as a bad call is sent again in halves, down to the items refused
        alone: those are dropped (logged, their claims lapse), every other one ends as sent.
        A Redis fault meanwhile puts what is not yet known back to pending."""
        known: dict[int, bool | None] = {}  # index -> landed, refused by its lock, or bad
        try:
            await self._halves(items, 0, known)
        except RedisUnavailable as fault:
            self.pending[:0] = [(f, None) for i, f in enumerate(items) if i not in known]
            event("redis_error", during="finish", error=str(fault))
            return True
        finally:
            bad = [items[i].id for i, ok in sorted(known.items()) if ok is None]
            if bad:
                event("finish_refused_bad_call", jobs=bad, of=len(items), error=str(exc))
        sent = [i for i in sorted(known) if known[i] is not None]
        ended, oks = [items[i] for i in sent], [bool(known[i]) for i in sent]
        refused = [item for item, ok in zip(ended, oks, strict=True) if not ok]
        if refused:
            await self._keep_outcomes(refused, None)
        self._settle(ended, oks, None, 0, 0.0)
        await self._forget_waits(ended, oks)
        return False

    async def _halves(self, items: list[Finish], first: int, known: dict[int, bool | None]) -> None:
        """`items` (from index `first` of the batch) were refused together as a bad call."""
        if len(items) == 1:
            known[first] = None
            return
        half = len(items) // 2
        for start, part in ((0, items[:half]), (half, items[half:])):
            try:
                oks = await self.lane.queue.finish(part)
            except BadCall:
                await self._halves(part, first + start, known)
            else:
                known.update((first + start + n, ok) for n, ok in enumerate(oks))

    def _settle(
        self,
        items: list[Finish],
        oks: list[bool],
        claimed: ClaimBatch | None,
        want: int,
        sent: float,
    ) -> None:
        for item, ok in zip(items, oks, strict=True):
            if not ok:
                event("finish_refused_lock_lost", job=item.id, action=item.action)
        if claimed is not None:
            self.lane.accept(claimed, want, sent)
            if len(claimed.claims) < want:
                self.lane.wake.set()  # the queue ran dry: let the pump re-arm its timer

    async def _forget_waits(self, items: list[Finish], oks: list[bool]) -> None:
        """A finished job's wait state goes (its TTL is only the backstop)."""
        if not self.waited:
            return
        ended = [
            item.id
            for item, ok in zip(items, oks, strict=True)
            if ok and item.action == "finish" and item.id in self.waited
        ]
        self.waited.difference_update(item.id for item in items)
        if not ended or self.forget is None:
            return
        try:
            await self.forget(self.lane.name, ended)
        except Exception as exc:  # the TTL removes it later; the flush goes on
            event("wait_state_forget_failed", queue=self.lane.name, jobs=len(ended), error=str(exc))

    def _write_local(self, runs: Iterable[bytes]) -> None:
        """The local copy never keeps a claim from ending: the finish carries every record."""
        try:
            self.records.append(runs)
        except Exception as exc:  # RecordLog logs its own disk faults; this is anything else
            event("run_log_failed", queue=self.lane.name, error=f"{type(exc).__name__}: {exc}")

    # -- keeping the outcomes of refused finishes ------------------------------------------

    async def _keep_outcomes(self, refused: list[Finish], claimed: ClaimBatch | None) -> None:
        """A finish refused because its claim was swept (Redis away past the lock) still knows
        how its run ended: mirrored while no other claim holds the job, the re-pickup settles
        on it instead of running the job again. The call that was refused may itself have
        claimed the job again: that claim has run nothing yet, so its token fences the write.
        Another daemon's fresh claim defers one beat for exactly this (gates/settled.py), so a
        record it blocked is tried again in the background. Best effort: a fault costs a rerun."""
        ours = {c.id: c.token for c in claimed.claims} if claimed is not None else {}
        rows = [
            (item.id, ours.get(item.id, item.token), item.run_id, item.run)
            for item in refused
            if item.run and item.action != "defer"  # a deferred run was stopped: nothing to keep
        ]
        left = await self._keep(rows)
        if left:
            task = asyncio.get_running_loop().create_task(self._keep_again(left))
            self.keeping.add(task)
            task.add_done_callback(self.keeping.discard)

    async def _keep_again(self, rows: list[Kept]) -> None:
        for _ in range(KEEP_TRIES):
            if not rows or await self.lane.life.stopped_within(KEEP_EVERY_S):
                return
            rows = await self._keep(rows)

    async def _keep(self, rows: list[Kept]) -> list[Kept]:
        """Store what it can; the rows refused for now (another claim holds the job)."""
        if not rows:
            return []
        queue = self.lane.queue
        argv: list[str | bytes | int] = []
        for job_id, token, run_id, run in rows:
            argv += [job_id, token, run_id, run]
        try:
            with redis_call("keep outcomes"):
                kept = set(await record_runs(queue.redis, queue.keys, argv))
        except (RedisUnavailable, BadCall) as exc:
            event("refused_outcome_not_kept", queue=queue.name, error=str(exc))
            return []
        if kept:
            event("refused_outcome_kept", queue=queue.name, runs=sorted(kept))
        return [row for row in rows if row[2] not in kept]
