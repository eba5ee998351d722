"""The profile runner with real processes: verdicts by exit code, timeouts and aborts that
kill the whole process group, capped output, a scrubbed environment, a free event loop."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from dispatch.config.schemas import WaitProfile
from dispatch.gates.wait.profiles import OUTPUT_CAP, ProfileRunner, command_problem
from dispatch.host.text import first_line

pytestmark = pytest.mark.anyio


def py(code: str, *args: str, timeout_ms: int = 10_000) -> WaitProfile:
    return WaitProfile(command=[sys.executable, "-c", code, *args], timeout_ms=timeout_ms)


async def ask(profile: WaitProfile, target: str = "acme/web#7", abort=None):
    return await ProfileRunner({"PATH": os.environ["PATH"], "SECRET_URL": "x"}).check(
        profile, target, abort or asyncio.Event()
    )


@pytest.mark.parametrize(
    ("code", "verdict"),
    [(0, "go"), (3, "hold"), (2, "never"), (1, "fault"), (7, "fault"), (-9, "fault")],
)
async def test_the_exit_code_is_the_verdict(code: int, verdict: str) -> None:
    if code < 0:
        script = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    else:
        script = f"print('PROJ-12 still open'); raise SystemExit({code})"
    answer = await ask(py(script))
    assert answer.verdict == verdict
    if code >= 0:
        assert answer.line == "PROJ-12 still open"
    else:
        assert answer.line == "killed by signal 9"


async def test_only_the_target_is_substituted_and_no_shell_reads_it() -> None:
    answer = await ask(py("import sys; print(sys.argv[1:])", "{target}", "x{target}y"), "a;b $(c)")
    assert answer.line == "['a;b $(c)', 'xa;b $(c)y']"


async def test_the_environment_is_scrubbed() -> None:
    answer = await ask(py("import os; print(sorted(os.environ))"))
    assert "SECRET_URL" not in answer.line and "PATH" in answer.line


async def test_output_is_capped_and_only_the_first_line_kept() -> None:
    script = "import sys; sys.stdout.write('\\n  first\\n' + 'x' * 1_000_000); sys.exit(3)"
    answer = await ask(py(script))
    assert (answer.verdict, answer.line) == ("hold", "first")
    assert first_line(b"a" * OUTPUT_CAP) == "a" * 200


async def test_a_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    script = (
        "import subprocess, sys, time;"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pid_file)!r}, 'w').write(str(c.pid)); time.sleep(60)"
    )
    started = time.monotonic()
    answer = await ask(py(script, timeout_ms=1500))
    assert answer.verdict == "fault" and "timed out" in answer.line
    assert time.monotonic() - started < 8
    assert not _alive(int(pid_file.read_text()))


async def test_an_abort_cuts_the_check_short_and_kills_it(tmp_path: Path) -> None:
    abort = asyncio.Event()
    asyncio.get_running_loop().call_later(0.3, abort.set)
    answer = await ask(py("import time; print('x', flush=True); time.sleep(60)"), abort=abort)
    assert answer.verdict == "aborted"


async def test_the_event_loop_stays_free_while_a_check_runs() -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    await ask(py("import time; time.sleep(0.5); raise SystemExit(3)"))
    ticker.cancel()
    assert ticks > 20


async def test_a_command_that_cannot_start_could_not_tell(tmp_path: Path) -> None:
    answer = await ask(WaitProfile(command=[str(tmp_path / "missing")]))
    assert answer.verdict == "fault" and "could not start" in answer.line


def test_doctor_finds_missing_and_unexecutable_commands(tmp_path: Path) -> None:
    script = tmp_path / "check"
    script.write_text("#!/bin/sh\nexit 0\n")
    assert command_problem(WaitProfile(command=[str(script)])) == f"{script} is not executable"
    script.chmod(0o755)
    assert command_problem(WaitProfile(command=[str(script)])) is None
    assert command_problem(WaitProfile(command=["sh", "-c", "true"])) is None
    assert "not found" in (command_problem(WaitProfile(command=["no-such-check"])) or "")


def _alive(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # reaped by init once its parent is gone; a zombie still answers kill 0 for a moment
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return False
        time.sleep(0.05)
    return True


async def test_a_check_is_answered_at_its_exit_though_a_child_still_holds_its_output() -> None:
    # exits 0 at once, leaving a background child with the check's stdout and stderr open
    profile = WaitProfile(command=["sh", "-c", "echo ready; sleep 60 & exit 0"], timeout_ms=4_000)
    answer = await ask(profile)
    assert (answer.verdict, answer.line) == ("go", "ready")
