"""Boot: the runner reaps what an earlier process of this host left, and only when it could
tell are this host's stale fleet lease holders freed."""

from __future__ import annotations

import pytest

from dispatch.daemon.boot import boot
from dispatch.fleet.leases import FleetLeases, LeaseSettings, holders
from dispatch.queue.keys import lease_keys
from dispatch.runners.base import IsLive, RunContext, Runner, RunResult
from dispatch.runners.process import ProcessRunner

pytestmark = pytest.mark.anyio


class Leftovers(Runner):
    """A runner whose reap answers as told and notes what it was asked."""

    def __init__(self, could_tell: bool) -> None:
        self.could_tell = could_tell
        self.asked: list[tuple[str, bool]] = []

    async def run(self, ctx: RunContext) -> RunResult:
        raise AssertionError("boot runs nothing")

    async def reap(self, host: str, is_live: IsLive) -> bool:
        self.asked.append((host, is_live("job-1", "3")))
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
    assert await boot(redis, runner, "h1", prefix) is could_tell
    assert runner.asked == [("h1", False)]  # at boot no claim is live
    left = await holders(redis, lease_keys("gpu", prefix))
    assert (left == {}) is could_tell


async def test_the_process_runner_has_nothing_to_reap_or_settle(redis, prefix):
    await _stale_holder(redis, prefix)
    runner = ProcessRunner()
    assert await runner.reap("h1", lambda job, fence: False)  # its runs died with their daemon
    await runner.settle()
    assert await boot(redis, runner, "h1", prefix)
    assert await holders(redis, lease_keys("gpu", prefix)) == {}
