"""The web page's jobs listing (dispatch/web/listing.py): what one page costs as the keyspace
grows, side by side at a small and a large size.

    python -m bench.web_jobs [--json] [--sizes 1000,1000000] [--reps 20]

Starts its own redis-server on a free port unless DISPATCH_REDIS_URL names one, fills it as
bench.fleet_view does (60% delayed over six reasons, 30% ready, 10% ended, on one queue) at
each size in turn, and times `--reps` reads of each page: the first page, a page deep in the
delayed jobs (a cursor 90% of the way in), one reason's jobs, and an id prefix no job has (the
worst case: it looks at the whole `SCAN` bound and keeps none). Figures: p50 / p95 wall per
page, ms, and the ratio of the large size's p50 to the small one's.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import uvloop
from redis.asyncio import Redis

from bench.fleet_view import clear, fill
from bench.support.redis import redis_server
from bench.support.stats import percentile
from dispatch.client import Client
from dispatch.web import listing

PREFIX = "bench-jobs"


def pages(size: int) -> dict[str, listing.Query]:
    deep = int(size * 0.6 * 0.9)  # 90% of the way into the delayed group
    return {
        "first": listing.Query(),
        "deep": listing.Query(state="delayed", at=(0, deep)),
        "reason": listing.Query(state="delayed", reason="host-slot"),
        "no_match": listing.Query(id="zzz"),
    }


async def one_size(url: str, size: int, reps: int, prefix: str) -> dict[str, Any]:
    redis = Redis.from_url(url)
    await clear(redis, prefix)
    await fill(redis, prefix, size, hosts=1)
    client = Client(redis, prefix)
    figures: dict[str, Any] = {}
    for name, query in pages(size).items():
        walls = []
        for _ in range(reps):
            t0 = time.perf_counter()
            found = await listing.page(client, query)
            walls.append(time.perf_counter() - t0)
        figures[name] = {
            "p50_ms": round(percentile(walls, 0.5) * 1000, 2),
            "p95_ms": round(percentile(walls, 0.95) * 1000, 2),
            "rows": len(found.jobs),
            "looked": found.looked,
        }
    await clear(redis, prefix)
    await redis.aclose()
    return figures


async def run(url: str, sizes: list[int], reps: int, prefix: str = PREFIX) -> dict[str, Any]:
    found = {str(size): await one_size(url, size, reps, prefix) for size in sizes}
    small, large = found[str(sizes[0])], found[str(sizes[-1])]
    ratios = {name: round(large[name]["p50_ms"] / small[name]["p50_ms"], 2) for name in small}
    return {"sizes": found, "large_over_small_p50": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,1000000")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with redis_server() as url:
        figures = uvloop.run(run(url, sizes, args.reps))
    print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
