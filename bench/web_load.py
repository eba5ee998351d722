"""The web page under load: what open overviews cost Redis while jobs pour in.

    python -m bench.web_load [--seconds 60] [--streams 20] [--rate 1000] [--json]

Starts a redis-server and one `dispatch web` process of its own on free loopback ports (both
children the bench kills on its way out: bench.support.children), opens `--streams` event
streams on /events (httpx, a connection each), and submits `--rate` jobs a second (one a
millisecond by default) for `--seconds` through the public client (`Client.submit`), paced
by the clock: what is due is submitted at once, so a slow spell is caught up, not dropped.
No daemon runs: the jobs pile up as ready, and every frame of the overview differs. The page
has no token: it listens on loopback, read-only, as the streams need nothing more.

Phases: calibrate (the submitter alone), idle (the streams open, nothing submitted,
`--idle-s`), load (`--seconds`), calibrate again once the page is stopped, then the reads.

Figures:
  web_cmds_per_s        the commands the redis-server ran for the page each second of the
                        load (`web_cmds`: by command), from INFO commandstats deltas less the
                        submitter's share. Redis 7.0 counts commands per server, not per
                        connection, so a submit's commands by name (its EVALSHA and the calls
                        its script makes, which commandstats counts too) are counted with the
                        submitter alone, before the page starts and again after it stops
                        (`submit_cmds`, before / after: the same when the subtraction is
                        sound), and that many of each are taken off per job submitted.
  idle_web_cmds_per_s   the same with the streams open and nothing submitted: exact, nothing
                        to subtract (`idle_web_cmds`: by command)
  frame_gap_p50/p95/max_ms   the time between two overview frames on one stream, pooled
                        over the streams: a frame at most once a second, so 1,000 ms plus the
                        read and render of whichever stream asked first
                        (`frame_gaps_over_1500_ms`: how many gaps missed a second)
  read_p50/p95_ms, render_p50/p95_ms   the page's own read (`Web.feed`, as the server runs it:
                        snapshot and extras, `Frame.read_s`) and the overview's render, timed in
                        the bench against the same Redis once the load stops (the server does
                        not publish its own timings)
  events_per_stream_per_s   overview frames each stream received a second of the load
  submitted_per_s       the rate the submitter reached
  web_cpu_pct, redis_cpu_pct, steal_pct   of one core, over the load

It prints figures and asserts nothing timed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvloop
from redis.asyncio import Redis

from bench.fleet_view import clear
from bench.support.children import Children, Daemon, children, daemon_env, spawn, start_redis
from bench.support.cpu import machine_cpu_s, process_cpu_s
from bench.support.redis import Stats, free_port, redis_version, stats
from bench.support.stats import percentile
from dispatch.client import Client
from dispatch.config.settings import from_env
from dispatch.model import Job, new_id
from dispatch.web.auth import Gate
from dispatch.web.site import Web

PREFIX = "bench-web"
READS = 20
START_S = 30.0
T = TypeVar("T")
BURST = 32  # submits at once at most when behind: a connection each, from the pool


@dataclass
class Stream:
    """One open /events stream: the monotonic instant of each overview frame received."""

    frames: list[float] = field(default_factory=list)

    def within(self, start: float, end: float) -> list[float]:
        return [t for t in self.frames if start <= t <= end]

    def gaps(self, start: float, end: float) -> list[float]:
        """Seconds between the frames received from `start` to `end`."""
        return [b - a for a, b in itertools.pairwise(self.within(start, end))]


async def follow(http: httpx.AsyncClient, url: str, stream: Stream) -> None:
    async with http.stream("GET", f"{url}/events") as answer:
        async for line in answer.aiter_lines():
            if line == "event: overview":
                stream.frames.append(time.monotonic())


def job() -> Job:
    return Job(id=new_id(), command=["true"])


async def submit_for(client: Client, rate: float, seconds: float) -> int:
    """Submit `rate` jobs a second for `seconds`, catching up when behind; how many."""
    start, sent = time.monotonic(), 0
    while (elapsed := time.monotonic() - start) < seconds:
        due = min(int(elapsed * rate) - sent, BURST)
        if due > 0:
            await asyncio.gather(*(client.submit(job()) for _ in range(due)))
            sent += due
        else:
            await asyncio.sleep(0.001)
    return sent


async def cost(redis: Redis, work: Awaitable[T]) -> tuple[Stats, T]:
    """The server's commands and CPU while `work` runs, and what it returned."""
    before = await stats(redis)
    result = await work
    return await stats(redis) - before, result


async def submit_cost(client: Client, n: int) -> dict[str, float]:
    """A submit's commands, by name, over `n` submits by the submitter alone: what is taken
    off the load's counts per job. A first burst loads the script (SCRIPT LOAD after a
    NOSCRIPT) and opens the pool's connections (each says CLIENT SETINFO twice), uncounted."""
    await asyncio.gather(*(client.submit(job()) for _ in range(BURST)))
    spent, sent = await cost(client.redis, submit_for(client, 2_000, n / 2_000))
    return {name: calls / sent for name, calls in spent.calls.items()}


def start_web(kids: Children, env: dict[str, str], work: Path) -> tuple[str, Daemon]:
    port = free_port()
    argv = [sys.executable, "-m", "dispatch", "web", "--listen", f"127.0.0.1:{port}"]
    web = Daemon("web", work, env, spawn(argv, work / "web.log", env))
    kids.daemons.append(web)  # killed with the rest on the way out
    return f"http://127.0.0.1:{port}", web


async def answering(url: str, web: Daemon) -> None:
    """Poll the page until it answers, `START_S` at most; exit with its log if it died."""
    deadline = time.monotonic() + START_S
    async with httpx.AsyncClient(timeout=1.0) as http:
        while time.monotonic() < deadline:
            if web.proc is not None and web.proc.poll() is not None:
                sys.exit(f"dispatch web exited:\n{(web.state / 'web.log').read_text()}")
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(f"{url}/signin")).status_code == 200:
                    return
            await asyncio.sleep(0.05)
    sys.exit(f"dispatch web did not answer within {START_S:g} s")


async def stop_web(web: Daemon) -> None:
    web.expected_exit = True
    web.send(signal.SIGTERM)
    if not await web.gone():
        sys.exit("dispatch web outlived its SIGTERM")


async def first_frames(streams: list[Stream]) -> None:
    deadline = time.monotonic() + START_S
    while not all(s.frames for s in streams):
        if time.monotonic() > deadline:
            sys.exit("not every stream had a frame")
        await asyncio.sleep(0.05)


@dataclass
class Load:
    """What the page's streams saw and what the machine, the page and Redis spent."""

    streams: list[Stream]
    idle: Stats | None = None  # the idle phase's commands and Redis CPU
    idle_s: float = 0.0
    spent: Stats | None = None  # the load's
    sent: int = 0
    start: float = 0.0
    end: float = 0.0
    web_cpu_s: float = 0.0
    steal_s: float = 0.0

    @property
    def took(self) -> float:
        return self.end - self.start


async def load(client: Client, page: str, web_pid: int, args: argparse.Namespace) -> Load:
    """The streams opened, the idle phase, then the submitter over the load window."""
    found = Load([Stream() for _ in range(args.streams)])
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None)) as http:
        tasks = [asyncio.create_task(follow(http, page, s)) for s in found.streams]
        try:
            await first_frames(found.streams)
            found.idle, _ = await cost(client.redis, asyncio.sleep(args.idle_s))
            found.idle_s = args.idle_s
            cpu, steal = process_cpu_s([web_pid]), machine_cpu_s()[1]
            found.start = time.monotonic()
            work = submit_for(client, args.rate, args.seconds)
            found.spent, found.sent = await cost(client.redis, work)
            found.end = time.monotonic()
            found.web_cpu_s = process_cpu_s([web_pid]) - cpu
            found.steal_s = machine_cpu_s()[1] - steal
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return found


async def reads(env: dict[str, str], redis: Redis) -> tuple[list[float], list[float]]:
    """The page's own read and render, `READS` times, each read fresh (`every_s` 0); a first
    one, which compiles the template, is not counted."""
    settings = from_env(env)
    web = Web(settings, Client(redis, settings.prefix, "bench"), Gate(""), every_s=0.0)
    web.overview_html(await web.feed.latest())
    read_s, render_s = [], []
    for _ in range(READS):
        frame = await web.feed.latest()
        t0 = time.perf_counter()
        web.overview_html(frame)
        render_s.append(time.perf_counter() - t0)
        read_s.append(frame.read_s)
    return read_s, render_s


def ms(seconds: list[float], q: float) -> float:
    return round(percentile(seconds, q) * 1000, 1)


def page_figures(found: Load, submit: tuple[dict[str, float], dict[str, float]]) -> dict[str, Any]:
    """The page's cost and the streams' frames over the load (module docstring)."""
    assert found.idle is not None and found.spent is not None
    took, idle_s = found.took, found.idle_s
    gaps = [g for s in found.streams for g in s.gaps(found.start, found.end)]
    frames = [len(s.within(found.start, found.end)) for s in found.streams]
    web = {n: c - found.sent * submit[0].get(n, 0.0) for n, c in found.spent.calls.items()}
    return {
        "seconds": round(took, 1),
        "streams": len(found.streams),
        "submitted_per_s": round(found.sent / took),
        "submit_cmds": [round(sum(per.values()), 3) for per in submit],
        "web_cmds_per_s": round(sum(web.values()) / took, 1),
        "web_cmds": per_s(web, took),
        "idle_web_cmds_per_s": round(found.idle.total / idle_s, 1),
        "idle_web_cmds": per_s(found.idle.calls, idle_s),
        "frame_gap_p50_ms": ms(gaps, 0.50),
        "frame_gap_p95_ms": ms(gaps, 0.95),
        "frame_gap_max_ms": round(max(gaps, default=float("nan")) * 1000, 1),
        "frame_gaps_over_1500_ms": sum(g > 1.5 for g in gaps),
        "events_per_stream_per_s": round(sum(frames) / len(frames) / took, 2),
        "web_cpu_pct": round(found.web_cpu_s / took * 100, 1),
        "redis_cpu_pct": round(found.spent.cpu_s / took * 100, 1),
        "steal_pct": round(found.steal_s / took * 100, 1),
    }


def per_s(calls: Mapping[str, float], seconds: float) -> dict[str, float]:
    """Each command's calls a second, those that rounded to none left out."""
    rates = {name: round(n / seconds, 1) for name, n in sorted(calls.items())}
    return {name: rate for name, rate in rates.items() if rate}


async def run(kids: Children, url: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Every phase against the Redis at `url`, on `args.prefix` (module docstring)."""
    env = daemon_env(url, args.prefix, work, "bench-web")
    (work / "config").mkdir(parents=True, exist_ok=True)
    client = Client(Redis.from_url(url), args.prefix, "bench-submitter")
    try:
        before = await submit_cost(client, args.calibrate)
        page, web = start_web(kids, env, work)
        await answering(page, web)
        found = await load(client, page, web.pid, args)
        await stop_web(web)
        after = await submit_cost(client, args.calibrate)
        read_s, render_s = await reads(env, client.redis)
        await clear(client.redis, args.prefix)
    finally:
        await client.redis.aclose()
    timings = {
        "read_p50_ms": ms(read_s, 0.50),
        "read_p95_ms": ms(read_s, 0.95),
        "render_p50_ms": ms(render_s, 0.50),
        "render_p95_ms": ms(render_s, 0.95),
    }
    about = {"redis": await redis_version(url), "python": platform.python_version()}
    return {**page_figures(found, (before, after)), **timings, **about, "cpus": os.cpu_count()}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.web_load", description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=60.0, help="length of the load")
    p.add_argument("--streams", type=int, default=20, help="open /events streams")
    p.add_argument("--rate", type=float, default=1000.0, help="jobs submitted a second")
    p.add_argument("--idle-s", type=float, default=5.0, help="length of the idle phase")
    p.add_argument("--calibrate", type=int, default=2_000, help="submits that price a submit")
    p.add_argument("--prefix", default=PREFIX, help="the keys' prefix (removed at the end)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    with children() as kids, tempfile.TemporaryDirectory(prefix="bench-web-") as tmp:
        url = start_redis(kids, Path(tmp))
        work = Path(tmp) / "web"
        work.mkdir()
        figures = uvloop.run(run(kids, url, work, args))
    print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
