"""`dispatch submit` and `dispatch jobs` on one server load neither redis-py nor asyncio (their
import alone takes longer than the command should: bench/cli.py), and still do their work."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import sys
from dispatch.cli import commands
try:
    commands.main(sys.argv[1:])
except SystemExit as exc:
    print("exit", exc.code, file=sys.stderr)
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"redis", "asyncio", "uvloop"})
print("loaded", loaded, file=sys.stderr)
"""


@pytest.mark.parametrize(
    "argv",
    [["submit", "--image", "x:1", "--", "true"], ["jobs"], ["jobs", "--json", "--target", "x"]],
)
def test_a_quick_command_loads_no_client(redis_url: str, prefix: str, argv: list[str]) -> None:
    env = {**os.environ, "DISPATCH_REDIS_URL": redis_url, "DISPATCH_PREFIX": prefix}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True, timeout=60
    )
    assert "exit 0" in done.stderr, done.stderr
    assert "loaded []" in done.stderr, done.stderr
    assert done.stdout.strip()
