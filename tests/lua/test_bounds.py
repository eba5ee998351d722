"""The bounds the scripts keep, at their edges, and the bad calls issue 11 saw write before
failing: each is refused with -4 and changes nothing (on the scripts before the fix, each
of these wrote first, or took a number with no upper bound).
"""

from __future__ import annotations

import pytest
from redis.exceptions import ResponseError

from dispatch.queue.keys import queue_keys
from dispatch.queue.scripts import Arg, Code, script

pytestmark = pytest.mark.anyio

BAD = Code.BAD_INPUT
DAY_MS = 86_400_000
YEAR_MS = 365 * DAY_MS
JOB = b'{"id":"x"}'
ENQUEUE = ["data", "queued", "wait", "delayed", "dedup", "dedup_exp", "done", "marker"]
CLAIM = [
    "wait",
    "delayed",
    "active",
    "data",
    "lock",
    "attempts",
    "stalls",
    "queued",
    "marker",
    "paused",
    "fence",
]
CANCEL = ["wait", "delayed", "active", "done", "data", "lock", "result", "runs", "runs_idx"]


class Q:
    def __init__(self, redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.k = queue_keys("jobs", prefix)

    def keys(self, fields: list[str]) -> list[str]:
        return [getattr(self.k, f) for f in fields]

    async def call(self, name: str, fields: list[str], args: list[Arg]):
        return await script(name)(self.redis, self.keys(fields), args)

    async def enqueue(self, *args: Arg):
        return await self.call("job_enqueue", ENQUEUE, list(args))

    async def now_ms(self) -> int:
        seconds, micros = await self.redis.time()
        return seconds * 1000 + micros // 1000

    async def snapshot(self) -> dict[bytes, bytes]:
        keys = [k async for k in self.redis.scan_iter(match=f"*{self.prefix}*")]
        return {key: await self.redis.dump(key) for key in sorted(keys)}

    async def refused(self, name: str, keys: list[str], args: list[Arg]) -> None:
        before = await self.snapshot()
        try:
            assert await script(name)(self.redis, keys, args) == BAD
        except ResponseError as exc:  # the scripts before the fix: an error, after a write
            pytest.fail(f"{name} failed with an error reply instead of -4: {exc}")
        finally:
            assert await self.snapshot() == before


@pytest.fixture
async def q(redis, prefix) -> Q:
    q = Q(redis, prefix)
    for job_id in ("a", "b"):
        assert await q.enqueue(job_id, JOB, 0, 0, f"k-{job_id}", 60_000) == [1, job_id.encode()]
    return q


# -- what was seen ---------------------------------------------------------------------------


async def test_claim_with_a_key_missing_pops_nothing(q: Q) -> None:
    await q.refused("job_claim", q.keys(CLAIM[:-1]), [2, "h", 60_000])
    assert await q.redis.lrange(q.k.wait, 0, -1) == [b"a", b"b"]


async def test_cancel_with_a_key_missing_writes_nothing(q: Q) -> None:
    await q.refused("job_cancel", q.keys(CANCEL[:-1]), ["a", b"{}", "a#1", b"{}"])


async def test_enqueue_with_its_first_key_missing_writes_nothing(q: Q) -> None:
    await q.refused("job_enqueue", q.keys(ENQUEUE[1:]), ["c", JOB, 0, 0, "k-c", 60_000])


async def test_enqueue_of_more_than_a_thousand_writes_no_dedup_entry(q: Q) -> None:
    """Before: 4,001 jobs with dedup keys wrote every dedup entry, then failed at `unpack`, and
    the keys went on naming jobs that did not exist."""
    args: list[Arg] = []
    for n in range(4001):
        args += [f"j{n}", JOB, 0, 0, f"k{n}", 60_000]
    await q.refused("job_enqueue", q.keys(ENQUEUE), args)
    await q.refused("job_enqueue", q.keys(ENQUEUE), args[: 6 * 1001])


async def test_a_due_time_past_ten_years_is_refused(q: Q) -> None:
    """Before: a due time of 1e300 parked the job for good."""
    far = await q.now_ms() + 10 * YEAR_MS + DAY_MS
    for due in ("1e300", far, 10**15):
        await q.refused("job_enqueue", q.keys(ENQUEUE), ["c", JOB, due, 0, "", 0])
    await q.refused("job_enqueue", q.keys(ENQUEUE), ["c", JOB, 0, 10 * YEAR_MS + 1, "", 0])
    near = await q.now_ms() + 10 * YEAR_MS - DAY_MS
    assert await q.enqueue("c", JOB, near, 0, "", 0) == [1, b"c"]
    assert await q.redis.zscore(q.k.delayed, "c") == near


async def test_a_dedup_window_past_a_year_is_refused(q: Q) -> None:
    """Before: a window of about 1e14 ms was written in exponent form and dedup was off."""
    for window in (10**14, YEAR_MS + 1, "1e14"):
        await q.refused("job_enqueue", q.keys(ENQUEUE), ["c", JOB, 0, 0, "k-c", window])
    assert await q.enqueue("c", JOB, 0, 0, "k-c", YEAR_MS) == [1, b"c"]
    assert await q.enqueue("d", JOB, 0, 0, "k-c", YEAR_MS) == [0, b"c"]


async def test_a_lock_past_a_day_is_refused(q: Q) -> None:
    await q.refused("job_claim", q.keys(CLAIM), [1, "h", DAY_MS + 1])
    reply = await q.call("job_claim", CLAIM, [1, "h", DAY_MS])
    assert reply[2:4] == [b"a", b"h:1"]
    assert await q.redis.zscore(q.k.active, "a") == reply[0] + DAY_MS
    await q.refused("job_extend", q.keys(["active", "lock", "cancel"]), [DAY_MS + 1, "a", "h:1"])
