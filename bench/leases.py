"""Lease contention: P processes x C contenders on K slots of one fleet lease, hold H, for D s.

    python -m bench.leases [--mode try|wait|both] [--json] [-P 2 -C 25 -K 3 --hold-ms 1 -D 10]

Starts its own redis-server on a free port unless DISPATCH_REDIS_URL names one.

Schemes, run on the same workload:
  lua       dispatch's lease scripts: one EVALSHA per acquire and one per release.
  numbered  the reference system's scheme, written afresh here: K numbered keys probed in order
            with SET NX PX (up to K round trips), released with GET then DEL (two, not atomic).

Modes:
  try   a gate's way: try once; when full, defer a jittered `--defer-ms` and try again.
  wait  another tool's way: wait until granted. Each process queues its waiters FIFO and only
        the head asks Redis; after a refusal it waits for a release notification (a PUBLISH
        pipelined with the release, so no extra round trip) or a jittered fallback timer. So
        Redis sees at most P waiters whatever C is, and a freed slot is retaken within about one
        round trip; polling with back-off would have to trade one of those for the other. Every
        process, the releaser's included, learns of a release the same way, so no process gets
        a head start on slots it has just freed (that would skew fairness).

Figures: acquisitions/s; acquire latency p50/p99 (try: the granted call, i.e. when a slot was
free; wait: from wanting to holding); Jain's fairness over contenders; round trips per acquire
attempt and per release; the most simultaneous holders seen by a counter in shared memory,
raised after a grant and lowered before the release, so it can only undercount what Redis
granted: above K means a broken lease.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized
from typing import Any, Protocol

import anyio
from redis.asyncio import Redis

from dispatch.keys import lease_keys
from dispatch.scripts import Arg, script

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
    ttl_ms: int = 10_000
    name: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    prefix: str = "bench"

    @property
    def channel(self) -> str:
        # a pub/sub channel, not a key: the bench's own, for release notifications
        return f"{self.prefix}:released:{self.name}"


class Scheme(Protocol):
    acquire_calls: int
    acquire_trips: int
    release_trips: int

    async def acquire(self, holder: str) -> bool: ...

    async def release(self, holder: str, notify: str | None) -> None: ...


class LuaScheme:
    """dispatch's lease: one EVALSHA per acquire, one per release (PUBLISH pipelined with it)."""

    def __init__(self, redis: Redis, w: Workload) -> None:
        self.redis, self.w = redis, w
        self.keys = lease_keys(w.name, w.prefix)
        self.acquire_calls = self.acquire_trips = self.release_trips = 0

    async def acquire(self, holder: str) -> bool:
        self.acquire_calls += 1
        self.acquire_trips += 1
        args: list[Arg] = [holder, self.w.slots, self.w.ttl_ms]
        reply = await script("lease_acquire")(
            self.redis, [self.keys.holders, self.keys.fence], args
        )
        return bool(reply[0] == 1)

    async def release(self, holder: str, notify: str | None) -> None:
        self.release_trips += 1
        async with self.redis.pipeline(transaction=False) as pipe:
            script("lease_release").queue(pipe, [self.keys.holders], [holder])
            if notify is not None:
                pipe.publish(self.w.channel, notify)
            await pipe.execute()


class NumberedScheme:
    """The reference scheme: K numbered keys, SET NX PX probed one by one; GET then DEL."""

    def __init__(self, redis: Redis, w: Workload) -> None:
        self.redis, self.w = redis, w
        # bench-only keys of a foreign scheme, so they are spelled here rather than in keys.py
        self.keys = [f"{w.prefix}:numbered:{w.name}:{i}" for i in range(w.slots)]
        self.taken: dict[str, str] = {}
        self.acquire_calls = self.acquire_trips = self.release_trips = 0

    async def acquire(self, holder: str) -> bool:
        self.acquire_calls += 1
        for key in self.keys:
            self.acquire_trips += 1
            if await self.redis.set(key, holder, nx=True, px=self.w.ttl_ms):
                self.taken[holder] = key
                return True
        return False

    async def release(self, holder: str, notify: str | None) -> None:
        key = self.taken.pop(holder)
        self.release_trips += 1
        if await self.redis.get(key) != holder.encode():
            return
        self.release_trips += 1
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(key)  # not atomic with the GET: the flaw dispatch's lease removes
            if notify is not None:
                pipe.publish(self.w.channel, notify)
            await pipe.execute()


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


class Turnstile:
    """Wait mode: one head per process asks Redis; a release notification wakes it."""

    def __init__(self) -> None:
        self.head = anyio.Lock()
        self.changed = anyio.Event()

    def notify(self) -> None:
        fired, self.changed = self.changed, anyio.Event()
        fired.set()

    async def wait_for(self, scheme: Scheme, holder: str, fallback_s: float) -> None:
        async with self.head:
            while True:
                seen = self.changed  # taken before asking, so a release in between still wakes us
                if await scheme.acquire(holder):
                    return
                with anyio.move_on_after(fallback_s * random.uniform(0.5, 1.5)):
                    await seen.wait()


@dataclass(slots=True)
class Tally:
    grants: list[int]
    latencies_ms: list[float] = field(default_factory=list)
    releases: int = 0


class Worker:
    """One process's contenders."""

    def __init__(self, w: Workload, index: int, counter: HolderCounter, redis: Redis) -> None:
        self.w, self.index, self.counter = w, index, counter
        self.scheme: Scheme = (LuaScheme if w.scheme == "lua" else NumberedScheme)(redis, w)
        self.turnstile = Turnstile()
        self.tally = Tally(grants=[0] * w.contenders)
        self.end = 0.0

    async def contend(self, c: int) -> None:
        holder, w = f"p{self.index}c{c}", self.w
        notify = "1" if w.mode == "wait" else None
        while time.monotonic() < self.end:
            wanted = time.monotonic()
            if w.mode == "wait":
                await self.turnstile.wait_for(self.scheme, holder, w.fallback_s)
            elif not await self.scheme.acquire(holder):
                await anyio.sleep(w.defer_s * random.uniform(0.5, 1.5))
                continue
            self.tally.latencies_ms.append((time.monotonic() - wanted) * 1000)
            self.tally.grants[c] += 1
            self.counter.enter()
            await anyio.sleep(w.hold_s)
            self.counter.leave()
            await self.scheme.release(holder, notify)
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
    worker = Worker(w, index, counter, redis)
    await redis.script_load(script("lease_acquire").source)
    await redis.script_load(script("lease_release").source)
    async with anyio.create_task_group() as tg:
        if w.mode == "wait":
            ready = anyio.Event()
            tg.start_soon(worker.listen, Redis.from_url(w.url), ready)
            await ready.wait()
        await anyio.to_thread.run_sync(start.wait)
        worker.end = time.monotonic() + w.seconds
        async with anyio.create_task_group() as contenders:
            for c in range(w.contenders):
                contenders.start_soon(worker.contend, c)
        tg.cancel_scope.cancel()
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


def worker_main(w: Workload, index: int, counter: HolderCounter, start: Any, out: Any) -> None:
    row = anyio.run(run_worker, w, index, counter, start, backend_options={"use_uvloop": True})
    out.put(row)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def jain(shares: list[int]) -> float:
    total = sum(shares)
    squares = sum(s * s for s in shares)
    return total * total / (len(shares) * squares) if squares else 0.0


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


@contextmanager
def redis_server() -> Iterator[str]:
    given = os.environ.get("DISPATCH_REDIS_URL")
    if given:
        yield given
        return
    binary = shutil.which("redis-server") or sys.exit("redis-server not found")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", tmp]
        proc = subprocess.Popen([*argv, "--appendonly", "no"], stdout=subprocess.DEVNULL)
        try:
            wait_for_port(port)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    sys.exit("redis-server did not start")


def redis_version(url: str) -> str:
    async def ask() -> str:
        client = Redis.from_url(url)
        info = await client.info("server")
        await client.aclose()
        return str(info.get("valkey_version") or info["redis_version"])

    return anyio.run(ask)


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
                seconds=args.seconds, defer_s=args.defer_ms / 1000,
            )  # fmt: skip


def report(args: argparse.Namespace, url: str) -> Row:
    out: Row = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "python": platform.python_version(),
        "redis": redis_version(url),
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
