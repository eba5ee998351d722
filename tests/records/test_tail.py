"""A run's output tail on a real Redis: the newest bytes within the cap, ids in order while
output keeps coming during a flush, an end mark with the exit code, nothing at all for a run
that printed nothing, and a Redis fault that loses the tail, never the run."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from redis.asyncio import Redis

from dispatch.records import tail as tails
from dispatch.records.tail import RunTail, Tails

pytestmark = pytest.mark.anyio


async def entries(redis: Redis, key: str) -> list[dict[bytes, bytes]]:
    found: Any = await redis.xrange(key)
    return [fields for _, fields in found]


async def test_the_tail_keeps_the_newest_bytes_and_ends_with_the_exit_code(
    redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tails, "CHUNK", 4)
    tail = Tails(redis, prefix, cap=10, ttl_s=60).open("jobs", "j1", 2, "h:17")
    assert tail is not None and tail.key.endswith(":tail:j1:2:17")
    tail.feed(b"0123456789abcdef")  # four chunks of 4: only the newest 10 bytes' chunks stay
    await tail.close(3)
    found = await entries(redis, tail.key)
    assert found[-1] == {b"end": b"3"}
    kept = b"".join(f[b"d"] for f in found[:-1])
    assert kept == b"89abcdef"  # the cap holds whole chunks: 8 of the newest 10 bytes
    assert 0 < await redis.pttl(tail.key) <= 60_000


async def test_output_fed_while_a_flush_is_on_the_wire_goes_out_after_it_in_order(
    redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tails, "FLUSH_S", 0)
    tail = RunTail(redis, f"{prefix}:t", "j", cap=1 << 20, ttl_s=60)
    on_wire, release = asyncio.Event(), asyncio.Event()
    real = tail._flush

    async def held(last: dict[str, str] | None = None) -> None:
        if last is None and not on_wire.is_set():  # hold the first flush's round trip open
            on_wire.set()
            await release.wait()
        await real(last)

    monkeypatch.setattr(tail, "_flush", held)
    tail.feed(b"one ")
    await asyncio.wait_for(on_wire.wait(), 5)
    tail.feed(b"two ")  # no second sender starts while the first is out
    tail.feed(b"three")
    release.set()
    await tail.close(0)
    found = await entries(redis, tail.key)
    assert b"".join(f.get(b"d", b"") for f in found) == b"one two three"
    assert found[-1] == {b"end": b"0"}


async def test_a_run_that_printed_nothing_writes_nothing(redis: Redis, prefix: str) -> None:
    tail = RunTail(redis, f"{prefix}:quiet", "j", cap=100, ttl_s=60)
    await tail.close(0)
    assert await redis.exists(tail.key) == 0
    assert Tails(redis, prefix, cap=0, ttl_s=60).open("jobs", "j", 1, "h:1") is None


async def test_a_tail_nothing_was_fed_to_closes_at_once_and_takes_nothing_after(
    redis: Redis, prefix: str
) -> None:
    quiet = RunTail(redis, f"{prefix}:quiet", "j", cap=100, ttl_s=60)
    assert quiet.close_unfed()
    quiet.feed(b"late")  # the run is over: nothing it printed is sent now
    assert quiet._sender is None and not quiet._buffer
    fed = RunTail(redis, f"{prefix}:fed", "j", cap=100, ttl_s=60)
    fed.feed(b"hi")
    assert not fed.close_unfed()  # its bytes and end mark go with `close`
    await fed.close(0)
    assert [f.get(b"end") for f in await entries(redis, fed.key)][-1] == b"0"


async def test_an_opened_tail_makes_its_writer_only_when_the_run_prints(
    redis: Redis, prefix: str
) -> None:
    opened = Tails(redis, prefix, cap=100, ttl_s=60)
    quiet = opened.open("jobs", "quiet", 1, "h:1")
    assert quiet is not None and quiet.close_unfed()
    quiet.feed(b"late")  # after the run: dropped, as a writer's own close_unfed drops it
    await asyncio.sleep(0)
    assert quiet._writer is None and await redis.exists(quiet.key) == 0
    fed = opened.open("jobs", "fed", 1, "h:2")
    assert fed is not None
    fed.feed(b"")  # an empty read is not output
    assert fed._writer is None
    fed.feed(b"hi")
    assert not fed.close_unfed()
    await fed.close(0)
    assert [f.get(b"d") or f.get(b"end") for f in await entries(redis, fed.key)] == [b"hi", b"0"]


async def test_a_redis_that_is_away_loses_the_tail_once_and_never_raises(
    logged: io.StringIO,
) -> None:
    away = Redis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=0.2)
    tail = RunTail(away, "k", "j1", cap=100, ttl_s=60)
    try:
        for _ in range(tails.MAX_FAULTS + 2):
            tail.feed(b"x")
            await tail._flush()
        await tail.close(1)
    finally:
        await away.aclose()
    assert logged.getvalue().count("log_tail_failed") == 1
    tail.feed(b"more")  # given up: it holds nothing more
    assert not tail._buffer
