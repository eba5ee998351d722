"""The shared feed (pure logic, an injected clock; the real read is covered by the route and
browser tests): one read per second however many ask, the last good frame kept when a read
fails, and the event stream's framing."""

from __future__ import annotations

import asyncio

import pytest

from dispatch.cli.fleet_extras import Extras
from dispatch.fleet.view import Snapshot
from dispatch.web.feed import Feed, changes, event

pytestmark = pytest.mark.anyio


class Reads:
    def __init__(self) -> None:
        self.count = 0
        self.error = ""
        self.gate: asyncio.Event | None = None

    async def __call__(self) -> tuple[Snapshot, Extras]:
        self.count += 1
        if self.gate is not None:
            await self.gate.wait()  # one read held open while the others ask
        return Snapshot(at_ms=self.count, error=self.error), Extras()


async def test_many_askers_share_one_read_a_second() -> None:
    now = [100.0]
    reads = Reads()
    feed = Feed(reads, every_s=1.0, monotonic=lambda: now[0])
    reads.gate = asyncio.Event()
    askers = [asyncio.create_task(feed.latest()) for _ in range(10)]
    await asyncio.sleep(0)
    reads.gate.set()
    frames = await asyncio.gather(*askers)
    assert reads.count == 1 and {f.seq for f in frames} == {1}
    now[0] += 0.5
    assert (await feed.latest()).seq == 1 and reads.count == 1
    now[0] += 0.6
    assert (await feed.latest()).seq == 2 and reads.count == 2


async def test_a_failed_read_keeps_the_last_good_frame_and_says_since_when() -> None:
    now = [0.0]
    reads = Reads()
    feed = Feed(reads, every_s=1.0, monotonic=lambda: now[0])
    good = await feed.latest()
    reads.error = "Redis did not answer within 3 s"
    now[0] = 5.0
    stale = await feed.latest()
    assert stale.snap is good.snap and stale.stale == reads.error and stale.seq == 2
    now[0] = 9.0
    assert feed.stale_for(await feed.latest()) == pytest.approx(4.0)
    reads.error = ""
    now[0] = 10.5
    fresh = await feed.latest()
    assert fresh.stale == "" and fresh.snap.at_ms == 4


async def test_the_stream_sends_a_body_only_when_it_changed() -> None:
    reads = Reads()
    feed = Feed(reads, every_s=0.0)
    bodies = iter(["<p>a</p>", "<p>a</p>", "<p>b</p>"])
    stream = changes(feed, lambda frame: next(bodies), keepalive_s=60)
    assert await anext(stream) == event("overview", "<p>a</p>")
    assert await anext(stream) == event("overview", "<p>b</p>")  # the repeat was not sent


def test_an_event_puts_each_line_on_its_own_data_line_and_drops_carriage_returns() -> None:
    assert event("x", "one\ntwo\r\n") == "event: x\ndata: one\ndata: two\ndata: \n\n"


async def test_a_stream_sleeps_until_the_frame_is_due_not_a_whole_period_after_it() -> None:
    now = [10.0]
    feed = Feed(Reads(), every_s=1.0, monotonic=lambda: now[0])
    await feed.latest()
    now[0] = 10.9
    assert feed.due_in() == pytest.approx(0.101)  # a fixed sleep of 1 s would miss a frame
    now[0] = 11.5
    assert feed.due_in() == pytest.approx(0.001)
