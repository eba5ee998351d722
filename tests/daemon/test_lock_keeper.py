"""The lock keeper judges every run by the injected clock, from when its last successful
renewal was sent: it stops a run before its lock can lapse, and kills it once the lock is
presumed lost. Redis here is a port nothing listens on, as in an outage."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Sequence

import pytest
from redis.asyncio import Redis

from dispatch.clock import FakeClock
from dispatch.config.settings import Settings
from dispatch.daemon import lock_keeper as lock_keeper_module
from dispatch.daemon.lock_keeper import LockKeeper, Running
from dispatch.model import Job
from dispatch.queue.transitions import Finish, NewJob, Queue
from dispatch.reasons import LOCK_LOST, OPERATOR_CANCEL
from tests.support.pickups import claim_of
from tests.support.redis_server import free_port

pytestmark = pytest.mark.anyio

# lock 3 s, grace 1 s, renewal every 0.2 s (margin 0.1 s): the stop starts 1.5 s after the last
# renewal was sent (3 - 1 - 2 x 0.2 - 0.1), and turns urgent at 2.9 s (3 - 0.1).
SETTINGS = Settings(
    redis_url="redis://unused", embedded=False, lock_ms=3000, stop_grace_s=1.0, renew_s=0.2
)


@pytest.fixture
async def away() -> AsyncIterator[Redis]:
    client = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    yield client
    await client.aclose()


def keeper_with_one_run(redis: Redis, clock: FakeClock) -> tuple[LockKeeper, Running]:
    entry = Running(claim_of(Job(id="j1", command=["true"])), renewed_at=clock.monotonic())
    queues = {"jobs": Queue(redis, "jobs", "t")}
    keeper = LockKeeper(SETTINGS, redis, queues, {("jobs", "j1"): entry}, clock)
    return keeper, entry


async def test_an_outage_shorter_than_the_stop_point_lets_the_run_go_on(away: Redis) -> None:
    clock = FakeClock()
    keeper, entry = keeper_with_one_run(away, clock)
    clock.advance(1.45)
    await keeper.tick()
    assert not entry.signal.event.is_set()


async def test_the_stop_starts_with_the_grace_still_inside_the_lock(away: Redis) -> None:
    clock = FakeClock()
    keeper, entry = keeper_with_one_run(away, clock)
    clock.advance(1.55)
    await keeper.tick()
    assert entry.signal.reason == LOCK_LOST
    assert not entry.signal.urgent.is_set()  # SIGTERM first: the grace ends before the lock
    clock.advance(1.4)  # 2.95 s: the lock is presumed lost
    keeper.judge([entry])
    assert entry.signal.urgent.is_set()


def test_a_frozen_daemon_kills_at_once_when_it_wakes() -> None:
    """After a SIGSTOP past the lock the first look kills without a grace."""
    clock = FakeClock()
    entry = Running(claim_of(Job(id="j1", command=["true"])), renewed_at=clock.monotonic())
    keeper = LockKeeper(SETTINGS, Redis(), {}, {("jobs", "j1"): entry}, clock)
    clock.advance(60)
    keeper.judge([entry])
    assert entry.signal.reason == LOCK_LOST and entry.signal.urgent.is_set()


async def test_a_renewal_that_succeeds_moves_the_deadline(redis: Redis, prefix: str) -> None:
    clock = FakeClock()
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob("j1", b"{}")])
    (claim,) = (await queue.claim(1, "h1", 3000)).claims
    entry = Running(claim, renewed_at=clock.monotonic())
    keeper = LockKeeper(SETTINGS, redis, {"jobs": queue}, {("jobs", "j1"): entry}, clock)
    clock.advance(1.4)
    await keeper.tick()
    assert entry.renewed_at == clock.monotonic()
    clock.advance(1.4)  # 2.8 s after the claim, 1.4 s after the renewal: still running
    await keeper.tick()
    assert not entry.signal.event.is_set()


async def test_a_refused_renewal_kills_at_once(redis: Redis, prefix: str) -> None:
    clock = FakeClock()
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob("j1", b"{}")])
    (claim,) = (await queue.claim(1, "h1", 3000)).claims
    await redis.hset(queue.keys.lock, "j1", "h2:99")  # another claim holds it now
    entry = Running(claim, renewed_at=clock.monotonic())
    keeper = LockKeeper(SETTINGS, redis, {"jobs": queue}, {("jobs", "j1"): entry}, clock)
    await keeper.tick()
    assert entry.signal.reason == LOCK_LOST and entry.signal.urgent.is_set()


async def test_a_stop_that_outlasts_grace_and_slack_is_logged_once(
    away: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run keeps its claim till it is gone; the keeper only says, once, that it lingers."""
    seen: list[dict[str, object]] = []
    monkeypatch.setattr(
        lock_keeper_module,
        "event",
        lambda name, **f: seen.append(f) if name == "stop_did_not_take" else None,
    )
    clock = FakeClock()
    keeper, entry = keeper_with_one_run(away, clock)
    entry.signal.abort(OPERATOR_CANCEL)
    await keeper.tick()  # first seen aborted now
    clock.advance(keeper.unconfirmed_after_s - 0.1)
    entry.renewed_at = clock.monotonic()  # its claim is renewed all along
    await keeper.tick()
    assert seen == []
    clock.advance(0.2)
    entry.renewed_at = clock.monotonic()
    await keeper.tick()
    await keeper.tick()
    [told] = seen
    assert told["job"] == "j1" and told["reason"] == OPERATOR_CANCEL and told["run"] == "its run"
    assert keeper.stuck()[0]["job"] == "j1" and keeper.stuck()[0]["since"]


async def test_a_renewal_crossing_its_runs_finish_reports_no_loss(
    redis: Redis, prefix: str, logged: io.StringIO
) -> None:
    """The renewal is sent with the run still going; the run ends and its finish lands before
    the renewal does, so the script finds no lock: the finish took it, nothing was lost. (Seen
    as a false `lock_lost` line in a loaded CI run.) The round trip is held open by an event."""
    clock = FakeClock()
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob("j1", b"{}")])
    (claim,) = (await queue.claim(1, "h1", 3000)).claims
    entry = Running(claim, renewed_at=clock.monotonic())
    running = {("jobs", "j1"): entry}
    keeper = LockKeeper(SETTINGS, redis, {"jobs": queue}, running, clock)
    sent, release = asyncio.Event(), asyncio.Event()
    extend = queue.extend

    async def held_open(
        locks: Sequence[tuple[str, str]], lock_ms: int
    ) -> tuple[list[str], list[str]]:
        sent.set()
        await release.wait()
        return await extend(locks, lock_ms)

    queue.extend = held_open  # type: ignore[method-assign]
    renewal = asyncio.create_task(keeper.tick())
    await sent.wait()
    del running[("jobs", "j1")]  # the run ended (worker._run), then its finish was sent
    assert await queue.finish([Finish("finish", claim.id, claim.token, b"{}")]) == [True]
    release.set()
    await renewal
    assert '"lock_lost"' not in logged.getvalue()
    assert not entry.signal.event.is_set()
