"""The driver side of `bench.compare`'s peer protocol, for the Python peers (arq, SAQ).

Runs under bench/peers/.venv, where dispatch is not installed: stdlib and redis-py only.
`bullmq/driver.mjs` speaks the same protocol in Node. One JSON line out per step, one word in:

    argv[1]   {"url", "queue", "concurrency", "jobs", "late_jobs", "spread_ms", "lead_ms", "poll_s"}
    out ready        in enqueue   N no-op jobs go in while no worker takes them
    out enqueued     in start     the worker is made (and started, where a pause holds it)
    out started      in go        the worker starts (or the queue resumes) and drains them
    out processed    in late      {"done", "last_finish_ms"}: the peer's own finish instants
    out lateness                  {"spread": [ms...], "burst": [ms...], "enqueue_ms": {...}}

Lateness is the handler's call instant minus the job's due instant, one machine, one clock.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from redis.asyncio import Redis

PHASES = ("spread", "burst")
CHUNK = 100  # enqueue calls in flight at once, for the peers that add one job per call
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Config:
    url: str
    queue: str
    concurrency: int
    jobs: int
    late_jobs: int
    spread_ms: int
    lead_ms: int
    poll_s: float | None = None  # a poll interval, for the peer that has one (arq)


def config() -> Config:
    return Config(**json.loads(sys.argv[1]))


def emit(phase: str, **row: Any) -> None:
    print(json.dumps({"phase": phase, **row}), flush=True)


async def expect(word: str) -> None:
    """Block (off the loop, so the worker keeps running) until the orchestrator says `word`."""
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if line.strip() != word:
        raise SystemExit(f"expected {word!r} on stdin, got {line!r}")


async def server_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def due_instants(cfg: Config, phase: str, start_ms: int) -> list[int]:
    """As bench.queue: one every spread_ms/late_jobs ms, or all at one instant."""
    if phase == "spread":
        return [start_ms + i * cfg.spread_ms // cfg.late_jobs for i in range(cfg.late_jobs)]
    return [start_ms] * cfg.late_jobs


@dataclass
class Tally:
    """Finishes and handler calls as the worker reports them; wakes a waiter at a count."""

    done: int = 0
    last_finish_ms: float = 0.0
    lateness_ms: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PHASES})
    _waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)

    def called(self, phase: str | None, due_ms: int | None) -> None:
        if phase is not None and due_ms is not None:
            self.lateness_ms[phase].append(time.time() * 1000 - due_ms)

    def finished(self, at_ms: float) -> None:
        self.done += 1
        self.last_finish_ms = max(self.last_finish_ms, at_ms)
        for count, future in self._waiters:
            if self.done >= count and not future.done():
                future.set_result(None)

    async def until(self, count: int, timeout_s: float = 600.0) -> None:
        if self.done >= count:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((count, future))
        await asyncio.wait_for(future, timeout_s)


Enqueue = Callable[[str, list[int]], Awaitable[None]]


async def late_phases(cfg: Config, redis: Redis, tally: Tally, enqueue: Enqueue) -> None:
    """Spread, then burst: delayed jobs due from a server instant on, each phase drained."""
    enqueue_ms = {}
    for phase in PHASES:
        target = tally.done + cfg.late_jobs
        start = await server_ms(redis) + cfg.lead_ms
        began = time.perf_counter()
        await enqueue(phase, due_instants(cfg, phase, start))
        enqueue_ms[phase] = round((time.perf_counter() - began) * 1000, 1)
        await tally.until(target)
    emit("lateness", **tally.lateness_ms, enqueue_ms=enqueue_ms)


class Peer(Protocol):
    """What a Python peer's driver supplies to `drive`: its library's calls, nothing more."""

    redis: Redis  # for the server's clock

    async def enqueue_noop(self, n: int) -> object: ...
    async def enqueue_due(self, phase: str, due_ms: int) -> object: ...
    async def prepare(self) -> None: ...  # the worker made, not started
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


async def drive(cfg: Config, tally: Tally, peer: Peer) -> None:
    """A Python peer through the orchestrator's steps, in order (the module docstring)."""
    emit("ready")
    await expect("enqueue")
    await in_chunks(range(cfg.jobs), peer.enqueue_noop)
    emit("enqueued")
    await expect("start")
    await peer.prepare()
    emit("started")
    await expect("go")
    await peer.start()
    await tally.until(cfg.jobs)
    emit("processed", done=tally.done, last_finish_ms=tally.last_finish_ms)
    await expect("late")

    async def delayed(phase: str, due: list[int]) -> None:
        await in_chunks(due, lambda at: peer.enqueue_due(phase, at))

    await late_phases(cfg, peer.redis, tally, delayed)
    await peer.stop()


async def in_chunks(items: Sequence[T], call: Callable[[T], Awaitable[object]]) -> None:
    """`call` each item, CHUNK at a time: concurrent enough, without one connection per job."""
    for i in range(0, len(items), CHUNK):
        await asyncio.gather(*(call(item) for item in items[i : i + CHUNK]))
