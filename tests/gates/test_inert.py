"""Gates inert under a config are skipped for every pickup of that snapshot, and looked at
again when the snapshot changes."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from dispatch.clock import FakeClock
from dispatch.config.schemas import ConfigSnapshot, PauseWindow
from dispatch.daemon.processor import Processor, ProcessorSettings
from dispatch.gates.base import ADMIT, Decision, Pickup, active
from dispatch.gates.pause import PauseGate
from dispatch.gates.spend import SpendGate
from dispatch.model import Job
from dispatch.runners.base import AbortSignal, IsLive, RunContext, Runner, RunResult
from tests.support.pickups import claim_of

pytestmark = pytest.mark.anyio


class Counting:
    name = "counting"

    def __init__(self, windows_make_it_live: bool) -> None:
        self.calls = 0
        self.live_with_windows = windows_make_it_live

    def inert(self, config: ConfigSnapshot) -> bool:
        return not (self.live_with_windows and config.windows)

    async def check(self, pickup: Pickup) -> Decision:
        self.calls += 1
        return ADMIT


class Done(Runner):
    async def run(self, ctx: RunContext) -> RunResult:
        return RunResult(started=True, exit_code=0, started_ms=1, ended_ms=2)

    async def reap(self, host: str, is_live: IsLive) -> bool:
        return True

    async def settle(self) -> None:
        pass


WINDOW = msgspec.convert({"scope": "*", "from": "01:00", "to": "02:00"}, PauseWindow)


def test_an_empty_config_leaves_out_the_gates_with_nothing_to_check() -> None:
    pause, spend = PauseGate(FakeClock()), SpendGate(None, FakeClock())  # type: ignore[arg-type]
    assert active([pause, spend], ConfigSnapshot()) == []
    assert active([pause, spend], ConfigSnapshot(windows=(WINDOW,))) == [pause]


async def test_a_new_snapshot_brings_an_inert_gate_back(tmp_path: Path) -> None:
    gate = Counting(windows_make_it_live=True)
    snapshots = [ConfigSnapshot()]
    proc = Processor(ProcessorSettings("h", tmp_path), Done(), [gate], config=lambda: snapshots[-1])
    for n in range(2):
        await proc.process(claim_of(Job(id=f"a{n}", command=["true"])), AbortSignal())
    assert gate.calls == 0
    snapshots.append(ConfigSnapshot(windows=(WINDOW,)))
    await proc.process(claim_of(Job(id="b", command=["true"])), AbortSignal())
    assert gate.calls == 1
