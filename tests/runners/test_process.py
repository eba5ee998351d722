"""The process runner on real child processes: a full disk loses the output, not the run; the
parent-death guard."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from functools import partial
from pathlib import Path

import pytest

from dispatch.host.commands import die_with_parent
from dispatch.model import Job
from dispatch.reasons import ABORTED_BEFORE_START, LOCK_LOST
from dispatch.runners.base import RunContext, classify
from dispatch.runners.process import ProcessRunner, _exited


@pytest.mark.anyio
async def test_a_full_disk_loses_the_output_not_the_run() -> None:
    # 1 MiB of output: far past a pipe's buffer, so the child blocks unless it is drained
    command = ["sh", "-c", "head -c 1048576 /dev/zero; exit 0"]
    ctx = RunContext(
        job=Job(id="j", command=command), attempt=1, host="h", fence="1",
        output_dir=Path("/dev"),
        output_file="full",
    )  # fmt: skip
    result = await ProcessRunner().run(ctx)
    assert (result.exit_code, result.output_lost) == (0, True)
    assert classify(result, "") == ("completed", "")


def test_a_child_whose_daemon_is_alive_runs() -> None:
    child = subprocess.Popen(["true"], preexec_fn=partial(die_with_parent, os.getpid()))
    assert child.wait(timeout=10) == 0


def test_a_child_whose_daemon_died_before_the_signal_was_armed_never_runs() -> None:
    """The daemon died between the fork and the arming (the child's parent is no longer
    the daemon it was forked from): the child kills itself before exec."""
    not_the_parent = os.getpid() + 1_000_000  # no process has this pid, ours least of all
    child = subprocess.Popen(["true"], preexec_fn=partial(die_with_parent, not_the_parent))
    assert child.wait(timeout=10) == -9


@pytest.mark.anyio
async def test_a_claim_judged_lost_at_the_spawn_never_forks(tmp_path: Path) -> None:
    """The lock keeper's last look comes right before the fork: a daemon frozen anywhere
    between its claim and here spawns nothing."""
    marker = tmp_path / "ran"
    ctx = RunContext(
        job=Job(id="j", command=["touch", str(marker)]), attempt=1, host="h", fence="1",
        output_dir=tmp_path,
        output_file="out",
    )  # fmt: skip
    ctx.signal.judged_by(lambda: ctx.signal.abort(LOCK_LOST, urgent=True))
    result = await ProcessRunner().run(ctx)
    assert (result.started, result.error) == (False, ABORTED_BEFORE_START)
    assert not marker.exists()


@pytest.mark.anyio
async def test_a_claim_judged_live_at_the_spawn_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    ctx = RunContext(
        job=Job(id="j", command=["touch", str(marker)]), attempt=1, host="h", fence="1",
        output_dir=tmp_path,
        output_file="out",
    )  # fmt: skip
    looked: list[bool] = []
    ctx.signal.judged_by(lambda: looked.append(True))
    result = await ProcessRunner().run(ctx)
    assert looked and (result.started, result.exit_code) == (True, 0)
    assert marker.exists()


@pytest.mark.anyio
async def test_a_run_says_whether_our_stop_ended_it(tmp_path: Path) -> None:
    """A child that traps TERM and exits 0 is still a stopped run, not its own exit."""

    def ctx_for(command: list[str]) -> RunContext:
        return RunContext(
            job=Job(id="j", command=command), attempt=1, host="h", fence="1",
            output_dir=tmp_path,
        output_file="out", grace_s=5,
        )  # fmt: skip

    own = await ProcessRunner().run(ctx_for(["true"]))
    trapped = ctx_for(["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.05; done"])
    trapped.signal.judged_by(lambda: None)
    asyncio.get_running_loop().call_later(0.3, trapped.abort, LOCK_LOST)
    stopped = await ProcessRunner().run(trapped)
    assert (own.exit_code, own.stopped) == (0, False)
    assert (stopped.exit_code, stopped.stopped) == (0, True)


def test_an_exited_child_the_loop_has_not_reaped_yet_counts_as_exited() -> None:
    """What `_wait_or_abort` asks when an abort comes: has the child exited already, though
    its exit has not reached the loop? Then the run ended on its own and is not stopped (a
    stopped run is handed back and runs again)."""
    child = subprocess.Popen(["sh", "-c", "read line; exit 7"], stdin=subprocess.PIPE)
    try:
        assert not _exited(child.pid)
        assert child.stdin is not None
        child.stdin.close()  # EOF: it exits
        deadline = time.monotonic() + 10
        while os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert _exited(child.pid)
        assert child.wait(timeout=5) == 7  # looked at, not reaped: its status is still there
        assert _exited(child.pid)  # reaped: exited all the same
    finally:
        child.kill()
        child.wait()
