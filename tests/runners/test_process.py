"""The process runner on real child processes: a full disk loses the output, not the run; the
parent-death guard."""

from __future__ import annotations

import os
import subprocess
from functools import partial
from pathlib import Path

import pytest

from dispatch.model import Job
from dispatch.runners.base import RunContext, classify
from dispatch.runners.process import ProcessRunner, _die_with_parent


@pytest.mark.anyio
async def test_a_full_disk_loses_the_output_not_the_run() -> None:
    # 1 MiB of output: far past a pipe's buffer, so the child blocks unless it is drained
    command = ["sh", "-c", "head -c 1048576 /dev/zero; exit 0"]
    ctx = RunContext(
        job=Job(id="j", command=command), attempt=1, host="h", fence="1",
        output_path=Path("/dev/full"),
    )  # fmt: skip
    result = await ProcessRunner().run(ctx)
    assert (result.exit_code, result.output_lost) == (0, True)
    assert classify(result, "") == ("completed", "")


def test_a_child_whose_daemon_is_alive_runs() -> None:
    child = subprocess.Popen(["true"], preexec_fn=partial(_die_with_parent, os.getpid()))
    assert child.wait(timeout=10) == 0


def test_a_child_whose_daemon_died_before_the_signal_was_armed_never_runs() -> None:
    """The daemon died between the fork and the arming (the child's parent is no longer
    the daemon it was forked from): the child kills itself before exec."""
    not_the_parent = os.getpid() + 1_000_000  # no process has this pid, ours least of all
    child = subprocess.Popen(["true"], preexec_fn=partial(_die_with_parent, not_the_parent))
    assert child.wait(timeout=10) == -9
