"""Lease contention: P processes x C contenders on K slots of one fleet lease, hold H, for D s.

    python -m bench.leases [--mode try|wait|both] [--json] [-P 2 -C 25 -K 3 --hold-ms 1 -D 10]

Starts its own redis-server on a free port unless DISPATCH_REDIS_URL names one.

Schemes, run on the same workload:
  lua       dispatch's lease scripts: one EVALSHA per acquire and one per release.
  numbered  the reference system's scheme, written afresh here: K numbered keys probed in order
            with SET NX PX (up to K round trips), released with GET then DEL (two, not atomic).

Modes:
  try   a gate's way: try once; when full, defer a jittered `--defer-ms` and try again.
  wait  another tool's way: wait until granted. Each process queues its waiters FIFO. A
        releaser with waiters behind it hands its slot to the head: its release and the head's
        acquire go out pipelined, one round trip, no notification hop. A slot goes back to the
        fleet (released with a PUBLISH pipelined, no extra round trip) after `--streak`
        hand-offs in a row, or when its process holds more than its share (`--share`, by
        default ceil(K / P)), so no slot sticks to one process. Otherwise one asker per process
        puts the head's case to Redis and, when refused, waits for a release notification or a
        jittered fallback timer (which also covers expiries). So Redis sees at most P askers
        whatever C is, and a slot is retaken within one round trip; polling with back-off would
        have to trade one of those for the other. Both schemes get the same waiting code; the
        numbered scheme's hand-off is its GET, then the DEL pipelined with the heir's SET NX PX
        of the key just freed.

Both schemes send their commands through the same lean path (`Wire`: one connection per task,
hiredis packing), so the gap between them is the scheme, not the client.

Figures: acquisitions/s; acquire latency p50/p99 (try: the granted call, i.e. when a slot was
free; wait: from wanting to holding); Jain's fairness over contenders; round trips per acquire
attempt and per release; the most simultaneous holders seen by a counter in shared memory,
raised after a grant and lowered before the release, so it can only undercount what Redis
granted: above K means a broken lease.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized
from typing import Any, Protocol, cast

import anyio
import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import Connection

from bench.support.redis import redis_server, redis_version
from bench.support.stats import jain, percentile
from dispatch.queue.keys import lease_keys
from dispatch.queue.scripts import Arg, script

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Workload:
    url: str
    mode: str  # try | wait
    scheme: str  # lua | numbered
    processes: int = 2
    contenders: int = 25
    slots: int = 3
    hold_s: float = 0.001
    seconds: float = 10.0
    defer_s: float = 0.002  # try mode: pause after a refusal (jittered +-50%)
    fallback_s: float = 0.05  # wait mode: retry without a notification (covers expiries)
    streak: int = 128  # wait mode: hand-offs in a row before a slot goes back to the fleet
    share: int = 0  # wait mode: most slots a process keeps by hand-off; 0: ceil(K / P)
    ttl_ms: int = 10_000
    name: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    prefix: str = "bench"

    @property
    def channel(self) -> str:
        # a pub/sub channel, not a key: the bench's own, for release notifications
        return f"{self.prefix}:released:{self.name}"


class Wire:
    """One task's own connection: commands packed by hiredis and written straight to it.

    redis-py's per-command path (pool checkout, retry wrapper, hooks) costs about 200 us of CPU
    per call here, four times what the call itself needs, and the bench's clients are CPU-bound.
    Each contender (and each process's asker) owns one Wire, so its calls never share a socket.
    Both schemes go through it: a leaner client speeds up the comparison scheme just as much.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def call(self, *args: Arg) -> Any:
        await self.conn.send_packed_command([_pack(args)], check_health=False)
        return await self.conn.read_response()

    async def pipe(self, *commands: tuple[Arg, ...]) -> list[Any]:
        """Several commands in one write, their replies in order: one round trip."""
        packed = b"".join(_pack(c) for c in commands)
        await self.conn.send_packed_command([packed], check_health=False)
        return [await self.conn.read_response() for _ in commands]


# hiredis's stubs declare a one-element tuple; it takes any number of arguments
_pack = cast("Callable[[tuple[Arg, ...]], bytes]", hiredis.pack_command)


class Scheme(Protocol):
    acquire_calls: int
    acquire_trips: int
    release_trips: int

    async def acquire(self, wire: Wire, holder: str) -> bool: ...

    async def release(self, wire: Wire, holder: str, notify: bool) -> None: ...

    async def handoff(self, wire: Wire, holder: str, heir: str) -> bool: ...


class LuaScheme:
    """dispatch's lease: one EVALSHA per acquire, one per release (PUBLISH pipelined with it)."""

    def __init__(self, w: Workload) -> None:
        self.w = w
        keys = lease_keys(w.name, w.prefix)
        acquire, release = script("lease_acquire"), script("lease_release")
        self.acquire_head = (b"EVALSHA", acquire.sha, 2, keys.holders, keys.fence)
        self.release_head = (b"EVALSHA", release.sha, 1, keys.holders)
        self.publish = (b"PUBLISH", w.channel, 1)
        self.acquire_calls = self.acquire_trips = self.release_trips = 0

    def acquire_command(self, holder: str) -> tuple[Arg, ...]:
        return (*self.acquire_head, holder, self.w.slots, self.w.ttl_ms)

    async def acquire(self, wire: Wire, holder: str) -> bool:
        self.acquire_calls += 1
        self.acquire_trips += 1
        reply = await wire.call(*self.acquire_command(holder))
        return bool(reply[0] == 1)

    async def release(self, wire: Wire, holder: str, notify: bool) -> None:
        self.release_trips += 1
        release = (*self.release_head, holder)
        await (wire.pipe(release, self.publish) if notify else wire.call(*release))

    async def handoff(self, wire: Wire, holder: str, heir: str) -> bool:
        """The release and the heir's acquire, pipelined: one round trip."""
        self.release_trips += 1
        self.acquire_calls += 1
        self.acquire_trips += 1
        _, reply = await wire.pipe((*self.release_head, holder), self.acquire_command(heir))
        return bool(reply[0] == 1)


class NumberedScheme:
    """The reference scheme: K numbered keys, SET NX PX probed one by one; GET then DEL."""

    def __init__(self, w: Workload) -> None:
        self.w = w
        # bench-only keys of a foreign scheme, so they are spelled here rather than in keys.py
        self.keys = [f"{w.prefix}:numbered:{w.name}:{i}" for i in range(w.slots)]
        self.publish = (b"PUBLISH", w.channel, 1)
        self.taken: dict[str, str] = {}
        self.acquire_calls = self.acquire_trips = self.release_trips = 0

    def set_nx(self, key: str, holder: str) -> tuple[Arg, ...]:
        return (b"SET", key, holder, b"NX", b"PX", self.w.ttl_ms)

    async def acquire(self, wire: Wire, holder: str) -> bool:
        self.acquire_calls += 1
        for key in self.keys:
            self.acquire_trips += 1
            if await wire.call(*self.set_nx(key, holder)) is not None:
                self.taken[holder] = key
                return True
        return False

    async def release(self, wire: Wire, holder: str, notify: bool) -> None:
        key = self.taken.pop(holder)
        self.release_trips += 1
        if await wire.call(b"GET", key) != holder.encode():
            return
        self.release_trips += 1
        # the DEL is not atomic with the GET: the flaw dispatch's lease removes
        await (wire.pipe((b"DEL", key), self.publish) if notify else wire.call(b"DEL", key))

    async def handoff(self, wire: Wire, holder: str, heir: str) -> bool:
        """GET, then the DEL pipelined with the heir's SET NX PX of the key just freed."""
        key = self.taken.pop(holder)
        self.release_trips += 1
        if await wire.call(b"GET", key) != holder.encode():
            return False
        self.release_trips += 1
        self.acquire_calls += 1
        self.acquire_trips += 1
        _, took = await wire.pipe((b"DEL", key), self.set_nx(key, heir))
        if took is not None:
            self.taken[heir] = key
        return took is not None


class HolderCounter:
    """Simultaneous holders across processes, in shared memory: independent of Redis."""

    def __init__(self, now: Synchronized[int], most: Synchronized[int]) -> None:
        self.now, self.most = now, most

    def enter(self) -> None:
        with self.now.get_lock():
            self.now.value += 1
            self.most.value = max(self.most.value, self.now.value)

    def leave(self) -> None:
        with self.now.get_lock():
            self.now.value -= 1


@dataclass(slots=True)
class Waiter:
    holder: str
    granted: asyncio.Future[int]  # resolves to the slot's hand-off streak


class Turnstile:
    """Wait mode: one process's waiters, FIFO. One asker puts the head's case to Redis and, when
    refused, waits for a release notification or the fallback timer. A releaser with waiters
    behind it hands its slot to the head instead (release and acquire in one round trip, no
    notification hop), at most `streak` times in a row and only while the process holds no more
    than `share` slots; otherwise the slot goes back to the fleet with a notification, so no
    slot sticks to one process."""

    def __init__(self, scheme: Scheme, fallback_s: float, streak: int, share: int) -> None:
        self.scheme, self.fallback_s, self.streak, self.share = scheme, fallback_s, streak, share
        self.held = 0  # slots this process holds
        self.queue: deque[Waiter] = deque()
        self.wake: asyncio.Future[None] | None = None
        self.notified = False

    def notify(self) -> None:
        self.notified = True
        self._wake()

    def _wake(self) -> None:
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(None)

    async def acquire(self, holder: str) -> int:
        """Wait until `holder` is granted; returns the slot's hand-off streak."""
        waiter = Waiter(holder, asyncio.get_running_loop().create_future())
        self.queue.append(waiter)
        if len(self.queue) == 1:
            self._wake()  # the asker may be idle with an empty queue
        return await waiter.granted

    async def release(self, wire: Wire, holder: str, streak: int) -> None:
        if self.queue and streak < self.streak and self.held <= self.share:
            heir = self.queue.popleft()
            if await self.scheme.handoff(wire, holder, heir.holder):
                heir.granted.set_result(streak + 1)
                return
            self.queue.appendleft(heir)  # the slot went to another process in between
        else:
            await self.scheme.release(wire, holder, True)
        self.held -= 1

    async def ask(self, wire: Wire) -> None:
        """The asker: runs for the whole run, one per process."""
        loop = asyncio.get_running_loop()
        while True:
            if self.queue:
                head = self.queue.popleft()  # out of the queue while in flight: not handed off
                self.notified = False
                if await self.scheme.acquire(wire, head.holder):
                    self.held += 1
                    head.granted.set_result(0)
                    continue
                self.queue.appendleft(head)
                if self.notified:
                    continue
            self.wake = loop.create_future()
            delay = self.fallback_s * random.uniform(0.5, 1.5)
            timer = loop.call_later(delay, _settle, self.wake)
            await self.wake
            timer.cancel()


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(slots=True)
class Tally:
    grants: list[int]
    latencies_ms: list[float] = field(default_factory=list)
    releases: int = 0


class Worker:
    """One process's contenders."""

    def __init__(self, w: Workload, index: int, counter: HolderCounter) -> None:
        self.w, self.index, self.counter = w, index, counter
        self.scheme: Scheme = (LuaScheme if w.scheme == "lua" else NumberedScheme)(w)
        share = w.share or -(-w.slots // w.processes)
        self.turnstile = Turnstile(self.scheme, w.fallback_s, w.streak, share)
        self.tally = Tally(grants=[0] * w.contenders)
        self.end = 0.0

    async def contend(self, c: int, wire: Wire) -> None:
        holder, w = f"p{self.index}c{c}", self.w
        while time.monotonic() < self.end:
            wanted = time.monotonic()
            streak = 0
            if w.mode == "wait":
                streak = await self.turnstile.acquire(holder)
            elif not await self.scheme.acquire(wire, holder):
                await anyio.sleep(w.defer_s * random.uniform(0.5, 1.5))
                continue
            self.tally.latencies_ms.append((time.monotonic() - wanted) * 1000)
            self.tally.grants[c] += 1
            self.counter.enter()
            await anyio.sleep(w.hold_s)
            self.counter.leave()
            if w.mode == "wait":
                await self.turnstile.release(wire, holder, streak)
            else:
                await self.scheme.release(wire, holder, False)
            self.tally.releases += 1

    async def listen(self, redis: Redis, ready: anyio.Event) -> None:
        async with redis.pubsub() as pubsub:
            await pubsub.subscribe(self.w.channel)
            ready.set()
            async for message in pubsub.listen():
                if message["type"] == "message":
                    self.turnstile.notify()


async def run_worker(w: Workload, index: int, counter: HolderCounter, start: Any) -> Row:
    redis = Redis.from_url(w.url)
    worker = Worker(w, index, counter)
    await redis.script_load(script("lease_acquire").source)
    await redis.script_load(script("lease_release").source)
    wires = [await wire(redis) for _ in range(w.contenders + 1)]  # the last one: the asker's
    async with anyio.create_task_group() as tg:
        if w.mode == "wait":
            ready = anyio.Event()
            tg.start_soon(worker.listen, Redis.from_url(w.url), ready)
            await ready.wait()
            tg.start_soon(worker.turnstile.ask, wires[-1])
        await anyio.to_thread.run_sync(start.wait)
        worker.end = time.monotonic() + w.seconds
        async with anyio.create_task_group() as contenders:
            for c in range(w.contenders):
                contenders.start_soon(worker.contend, c, wires[c])
        tg.cancel_scope.cancel()
    for line in wires:
        await line.conn.disconnect()
    await redis.aclose()
    t = worker.tally
    return {
        "grants": t.grants,
        "latencies_ms": t.latencies_ms,
        "acquire_calls": worker.scheme.acquire_calls,
        "releases": t.releases,
        "acquire_trips": worker.scheme.acquire_trips,
        "release_trips": worker.scheme.release_trips,
    }


async def wire(redis: Redis) -> Wire:
    line = Wire(Connection(**redis.connection_pool.connection_kwargs))
    await line.call(b"PING")  # connects, before the clock starts
    return line


def worker_main(w: Workload, index: int, counter: HolderCounter, start: Any, out: Any) -> None:
    row = anyio.run(run_worker, w, index, counter, start, backend_options={"use_uvloop": True})
    out.put(row)


def run(w: Workload) -> Row:
    ctx = mp.get_context("spawn")
    counter = HolderCounter(ctx.Value("i", 0), ctx.Value("i", 0))
    start, out = ctx.Barrier(w.processes), ctx.Queue()
    procs = [
        ctx.Process(target=worker_main, args=(w, i, counter, start, out))
        for i in range(w.processes)
    ]
    for p in procs:
        p.start()
    rows = [out.get(timeout=w.seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    return summarize(w, rows, counter.most.value)


def summarize(w: Workload, rows: list[Row], most: int) -> Row:
    grants = [g for r in rows for g in r["grants"]]
    latencies = [x for r in rows for x in r["latencies_ms"]]
    calls = sum(r["acquire_calls"] for r in rows)
    releases = sum(r["releases"] for r in rows)
    return {
        "acquisitions_per_s": round(sum(grants) / w.seconds, 1),
        "ops_per_s": round((calls + releases) / w.seconds, 1),
        "acquire_p50_ms": round(percentile(latencies, 0.50), 3),
        "acquire_p99_ms": round(percentile(latencies, 0.99), 3),
        "jain": round(jain(grants), 4),
        "max_holders": most,
        "acquire_calls_per_grant": round(calls / max(1, sum(grants)), 3),
        "round_trips_per_acquire": round(sum(r["acquire_trips"] for r in rows) / calls, 3),
        "round_trips_per_release": round(sum(r["release_trips"] for r in rows) / releases, 3),
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.leases", description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["try", "wait", "both"], default="both")
    p.add_argument("--scheme", choices=["lua", "numbered", "both"], default="both")
    p.add_argument("-P", "--processes", type=int, default=2)
    p.add_argument("-C", "--contenders", type=int, default=25)
    p.add_argument("-K", "--slots", type=int, default=3)
    p.add_argument("--hold-ms", type=float, default=1.0)
    p.add_argument("-D", "--seconds", type=float, default=10.0)
    p.add_argument("--defer-ms", type=float, default=2.0)
    p.add_argument("--streak", type=int, default=128, help="wait: hand-offs in a row, at most")
    p.add_argument("--share", type=int, default=0, help="wait: slots kept by hand-off, at most")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def workloads(args: argparse.Namespace, url: str) -> Iterator[Workload]:
    modes = ["try", "wait"] if args.mode == "both" else [args.mode]
    schemes = ["lua", "numbered"] if args.scheme == "both" else [args.scheme]
    for mode in modes:
        for scheme in schemes:
            yield Workload(
                url=url, mode=mode, scheme=scheme, processes=args.processes,
                contenders=args.contenders, slots=args.slots, hold_s=args.hold_ms / 1000,
                seconds=args.seconds, defer_s=args.defer_ms / 1000, streak=args.streak,
                share=args.share,
            )  # fmt: skip


def report(args: argparse.Namespace, url: str) -> Row:
    out: Row = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "python": platform.python_version(),
        "redis": anyio.run(redis_version, url),
        "workload": {k: v for k, v in vars(args).items() if k != "json"},
        "results": {},
    }
    for w in workloads(args, url):
        row = run(w)
        out["results"].setdefault(w.mode, {})[w.scheme] = row
        if not args.json:
            print(f"{w.mode:5} {w.scheme:9} " + " ".join(f"{k}={v}" for k, v in row.items()))
    for mode, by_scheme in out["results"].items():
        if {"lua", "numbered"} <= by_scheme.keys():
            theirs = by_scheme["numbered"]["acquisitions_per_s"] or float("nan")
            by_scheme["lua_vs_numbered"] = round(by_scheme["lua"]["acquisitions_per_s"] / theirs, 2)
            if not args.json:
                print(f"{mode:5} lua/numbered acquisitions: {by_scheme['lua_vs_numbered']}x")
    return out


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    with redis_server() as url:
        out = report(args, url)
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
