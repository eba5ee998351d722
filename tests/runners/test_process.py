"""The process runner's parent-death guard, on real child processes."""

from __future__ import annotations

import os
import subprocess
from functools import partial

from dispatch.runners.process import _die_with_parent


def test_a_child_whose_daemon_is_alive_runs() -> None:
    child = subprocess.Popen(["true"], preexec_fn=partial(_die_with_parent, os.getpid()))
    assert child.wait(timeout=10) == 0


def test_a_child_whose_daemon_died_before_the_signal_was_armed_never_runs() -> None:
    """The daemon died between the fork and the arming (the child's parent is no longer
    the daemon it was forked from): the child kills itself before exec."""
    not_the_parent = os.getpid() + 1_000_000  # no process has this pid, ours least of all
    child = subprocess.Popen(["true"], preexec_fn=partial(_die_with_parent, not_the_parent))
    assert child.wait(timeout=10) == -9
