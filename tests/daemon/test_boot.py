"""Boot: the runner reaps what an earlier process of this host left; only once it could tell
that every such run is gone are that process's claims handed back and this host's stale fleet
lease holders freed. Nothing is claimed before the boot succeeded; it is retried until then.
The reconcile reaps again later, keeping what a live claim or this process owns."""

from __future__ import annotations

import asyncio

import pytest

from dispatch.daemon.boot import boot, boot_until_done, reconcile
from dispatch.fleet.leases import FleetLeases, LeaseSettings, holders
from dispatch.queue.keys import lease_keys
from dispatch.queue.transitions import NewJob, Queue
from dispatch.runners.base import IsLive, RunContext, Runner, RunResult
from dispatch.runners.process import ProcessRunner
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio


class Leftovers(Runner):
    """A runner whose reap answers as told and notes what it was asked."""

    def __init__(self, could_tell: bool, probe: tuple[str, str] = ("job-1", "3")) -> None:
        self.could_tell = could_tell
        self.probe = probe
        self.asked: list[tuple[str, bool]] = []

    async def run(self, ctx: RunContext) -> RunResult:
        raise AssertionError("boot runs nothing")

    async def reap(self, host: str, is_live: IsLive) -> bool:
        self.asked.append((host, is_live(*self.probe)))
        return self.could_tell

    async def settle(self) -> None:
        pass


async def _stale_holder(redis, prefix: str) -> None:
    """A lease holder of h1 left by a process that is gone (leaving the context frees nothing)."""
    async with FleetLeases(redis, LeaseSettings(prefix=prefix), host="h1") as before_restart:
        assert await before_restart.acquire("gpu", slots=2)


@pytest.mark.parametrize("could_tell", [True, False])
async def test_stale_leases_are_freed_only_when_the_runner_could_reap(redis, prefix, could_tell):
    await _stale_holder(redis, prefix)
    runner = Leftovers(could_tell)
    assert await boot(redis, runner, "h1", prefix, [Queue(redis, "jobs", prefix)]) is could_tell
    assert runner.asked == [("h1", False)]  # at boot no claim is live
    left = await holders(redis, lease_keys("gpu", prefix))
    assert (left == {}) is could_tell


async def test_the_process_runner_has_nothing_to_reap_or_settle(redis, prefix):
    await _stale_holder(redis, prefix)
    runner = ProcessRunner()
    assert await runner.reap("h1", lambda job, fence: False)  # its runs died with their daemon
    await runner.settle()
    assert await boot(redis, runner, "h1", prefix, [Queue(redis, "jobs", prefix)])
    assert await holders(redis, lease_keys("gpu", prefix)) == {}


async def _claimed(queue: Queue, host: str, job_id: str) -> str:
    await queue.enqueue([NewJob(job_id, b"{}")])
    (claim,) = (await queue.claim(1, host, 60_000)).claims
    return claim.token


async def test_the_claims_a_predecessor_left_are_handed_back_once_its_runs_are_gone(redis, prefix):
    jobs, own = Queue(redis, "jobs", prefix), Queue(redis, "jobs@h1", prefix)
    left = await _claimed(jobs, "h1", "left")
    await _claimed(own, "h1", "local")
    theirs = await _claimed(jobs, "h2", "theirs")
    await _stale_holder(redis, prefix)
    runner = Leftovers(True, probe=("left", left))
    assert await boot(redis, runner, "h1", prefix, [jobs, own])
    assert runner.asked == [("h1", False)]  # about to be handed back: its run must stop
    assert await jobs.claims() == [("theirs", theirs)]  # another host's claim is not ours
    assert await own.claims() == []
    assert await redis.lrange(jobs.keys.wait, 0, -1) == [b"left"]
    assert await redis.lrange(own.keys.wait, 0, -1) == [b"local"]
    assert not await redis.exists(jobs.keys.stalls)  # nothing counted
    assert await holders(redis, lease_keys("gpu", prefix)) == {}


async def test_a_live_claim_of_another_process_keeps_its_run(redis, prefix):
    jobs = Queue(redis, "jobs", prefix)
    theirs = await _claimed(jobs, "h2", "theirs")
    runner = Leftovers(True, probe=("theirs", theirs))
    assert await boot(redis, runner, "h1", prefix, [jobs])
    assert runner.asked == [("h1", True)]
    assert await jobs.claims() == [("theirs", theirs)]


async def test_nothing_is_handed_back_nor_freed_while_runs_may_remain(redis, prefix):
    jobs = Queue(redis, "jobs", prefix)
    left = await _claimed(jobs, "h1", "left")
    await _stale_holder(redis, prefix)
    assert not await boot(redis, Leftovers(False), "h1", prefix, [jobs])
    assert await jobs.claims() == [("left", left)]
    assert len(await holders(redis, lease_keys("gpu", prefix))) == 1


class Flaky(Leftovers):
    """A runner whose reap fails a given number of times before it succeeds."""

    def __init__(self, failures: int) -> None:
        super().__init__(True)
        self.failures = failures

    async def reap(self, host: str, is_live: IsLive) -> bool:
        await super().reap(host, is_live)
        return len(self.asked) > self.failures


async def test_the_boot_is_retried_until_it_succeeds(redis, prefix):
    jobs = Queue(redis, "jobs", prefix)
    await _claimed(jobs, "h1", "left")
    runner, stop = Flaky(failures=2), asyncio.Event()
    assert await boot_until_done(redis, runner, "h1", prefix, [jobs], stop, first_s=0.01)
    assert len(runner.asked) == 3
    assert await redis.lrange(jobs.keys.wait, 0, -1) == [b"left"]


async def test_a_stop_ends_a_boot_that_cannot_succeed(redis, prefix):
    runner, stop = Flaky(failures=10**6), asyncio.Event()
    booting = asyncio.create_task(
        boot_until_done(redis, runner, "h1", prefix, [], stop, first_s=0.01, most_s=0.05)
    )
    await eventually(lambda: _asked(runner, 3))
    stop.set()
    assert await booting is False


async def _asked(runner: Leftovers, times: int) -> bool:
    return len(runner.asked) >= times


async def test_the_reconcile_keeps_live_claims_and_this_process_runs(redis, prefix):
    jobs = Queue(redis, "jobs", prefix)
    token = await _claimed(jobs, "h1", "running")
    seen: dict[tuple[str, str], bool] = {}

    class Judge(Leftovers):
        async def reap(self, host: str, is_live: IsLive) -> bool:
            probes = [("running", token), ("just-claimed", "h1:9"), ("gone", "h1:1")]
            seen.update({p: is_live(*p) for p in probes})
            return True

    assert await reconcile(Judge(True), "h1", [jobs], lambda: {("just-claimed", "h1:9")})
    assert seen == {
        ("running", token): True,
        ("just-claimed", "h1:9"): True,
        ("gone", "h1:1"): False,
    }
    assert await jobs.claims() == [("running", token)]  # the reconcile hands nothing back
