"""Spend-cap reservations: C concurrent reservers, each reserving in 4 ledgers x 3 windows, for D s.

    python -m bench.budget [--json] [-C 50 -D 10]

Starts its own redis-server on a free port unless DISPATCH_REDIS_URL names one.

Each reserver loops: reserve (one `budget_reserve` call across the `*`, repo, project and model
rows, each with a day, week and month run cap: 12 counters), then settle (one `budget_settle`
call). The caps are far above what the run can reach, so every reservation is granted and the
figure is the cost of the atomic check-and-take, not of refusals.

Figures: reservations/s; reserve latency p50/p99 (from the call to its reply, under C-way
contention on one hash slot); Redis commands sent per reservation and per settle (EVALSHA calls
from INFO commandstats, over the number of calls made: 1 means one round trip, whatever the
number of counters).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from typing import Any

import msgspec
import uvloop
from redis.asyncio import Redis

from bench.support.redis import command_calls, redis_server, redis_version
from bench.support.stats import percentile
from dispatch.config.limits import zone
from dispatch.config.schemas import Overlay, ScopedLimit
from dispatch.queue.scripts import load_all
from dispatch.spend.ledger import SpendLedger, reservation_id
from dispatch.spend.plan import Counter, Subject, counters

BIG = 10**12
ROWS = [
    {"scope": scope, "day": BIG, "week": BIG, "month": BIG}
    for scope in ("*", "acme/web", "project:web", "model:m1")
]


def plan(ledger: SpendLedger) -> list[Counter]:
    rows = [msgspec.convert(r, ScopedLimit) for r in ROWS]
    subject = Subject(repo="acme/web", folder=None, project="web", model="m1")
    now = int(time.time() * 1000)
    return counters(rows, subject, None, Overlay(), now, zone("UTC"), ledger.keys)


async def reserver(
    ledger: SpendLedger, found: list[Counter], name: int, until: float, lat: list[float]
) -> int:
    n = 0
    while time.perf_counter() < until:
        rid = reservation_id("jobs", f"b{name}", n, f"h:{name}")
        t0 = time.perf_counter()
        await ledger.reserve(rid, found, urgent=False)
        lat.append(time.perf_counter() - t0)
        await ledger.close_now(rid, [c.key for c in found], "settle", 0, 0)
        n += 1
    return n


async def evalsha_calls(redis: Redis) -> int:
    return (await command_calls(redis)).get("evalsha", 0)


async def run(url: str, concurrency: int, duration_s: float) -> dict[str, Any]:
    redis = Redis.from_url(url, max_connections=concurrency + 2)
    ledger = SpendLedger(redis, "bench")
    await load_all(redis)
    found = plan(ledger)
    before = await evalsha_calls(redis)
    lat: list[float] = []
    start = time.perf_counter()
    until = start + duration_s
    counts = await asyncio.gather(
        *(reserver(ledger, found, i, until, lat) for i in range(concurrency))
    )
    elapsed = time.perf_counter() - start
    calls = await evalsha_calls(redis) - before
    total = sum(counts)
    await redis.aclose()
    return {
        "concurrency": concurrency,
        "counters_per_reservation": len(found),
        "reservations": total,
        "reservations_per_s": round(total / elapsed),
        "reserve_p50_ms": round(percentile(lat, 0.50) * 1000, 2),
        "reserve_p99_ms": round(percentile(lat, 0.99) * 1000, 2),
        "redis_commands_per_reservation": round(calls / (2 * total), 3),
        "redis_commands_per_reserve_and_settle": round(calls / total, 3),
        "redis": await redis_version(url),
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-C", "--concurrency", type=int, default=50)
    parser.add_argument("-D", "--duration", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with redis_server() as url:
        figures = uvloop.run(run(url, args.concurrency, args.duration))
    print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
