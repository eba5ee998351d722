"""Host commands on real processes: what each policy hands a command, its group, its end."""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from dispatch.host.commands import (
    CHECK,
    GIT,
    JOB,
    RESOLVER,
    Policy,
    kill_group,
    read_capped,
    reap,
    spawn,
)

PY = sys.executable
# the child's process group, and the signal it gets when its parent dies (PR_GET_PDEATHSIG)
_SHOW = (
    "import ctypes, os; v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v)); "
    "print(os.getpgid(0) == os.getpid(), v.value)"
)


async def _output(proc: asyncio.subprocess.Process) -> tuple[int, bytes, bytes]:
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out, err or b""


def test_each_policy_inherits_only_its_variables() -> None:
    daemon = {"PATH": "/p", "HOME": "/h", "LANG": "C.UTF-8", "TZ": "UTC", "REDIS_URL": "r"}
    assert CHECK.inherited(daemon) == {"PATH": "/p", "HOME": "/h", "LANG": "C.UTF-8", "TZ": "UTC"}
    assert GIT.inherited(daemon) == {"PATH": "/p"}
    assert RESOLVER.inherited(daemon) == {"PATH": "/p", "HOME": "/h"}
    assert JOB.inherited(daemon) == {"PATH": "/p"}


def test_each_policy_has_its_own_defaults_for_what_the_daemon_lacks() -> None:
    assert CHECK.inherited({"HOME": ""}) == {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    assert CHECK.inherited({"PATH": ""})["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert GIT.inherited({}) == {"PATH": os.defpath}
    assert GIT.inherited({"PATH": ""}) == {"PATH": ""}  # set, though empty: kept
    assert RESOLVER.inherited({}) == {"PATH": os.defpath, "HOME": "/"}
    assert JOB.inherited({}) == {"PATH": ""}


def test_the_daemons_own_environment_is_the_default_source() -> None:
    assert JOB.inherited() == {"PATH": os.environ.get("PATH", "")}


@pytest.mark.anyio
async def test_a_command_sees_exactly_the_environment_it_is_given() -> None:
    proc = await spawn([PY, "-c", "import os; print(sorted(os.environ))"], GIT, {"ONLY": "1"})
    code, out, _ = await _output(proc)
    # the interpreter itself may add LC_CTYPE under a C locale; nothing of the daemon's
    assert code == 0 and set(ast.literal_eval(out.decode())) - {"LC_CTYPE"} == {"ONLY"}


@pytest.mark.anyio
async def test_stdin_is_empty_and_the_cwd_is_the_one_asked(tmp_path: Path) -> None:
    script = "import os, sys; print(repr(sys.stdin.read()), os.getcwd())"
    proc = await spawn([PY, "-c", script], CHECK, CHECK.inherited(), cwd=str(tmp_path))
    code, out, _ = await _output(proc)
    assert (code, out.decode().split()) == (0, ["''", str(tmp_path)])


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("policy", "out", "err"),
    [(CHECK, b"o\n", b"e\n"), (RESOLVER, b"o\n", b""), (JOB, b"o\ne\n", b"")],
)
async def test_stderr_goes_where_the_policy_says(policy: Policy, out: bytes, err: bytes) -> None:
    script = "import sys; print('o', flush=True); print('e', file=sys.stderr, flush=True)"
    proc = await spawn([PY, "-c", script], policy, policy.inherited())
    assert await _output(proc) == (0, out, err)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("policy", "shown"),
    [(CHECK, b"True 0"), (GIT, b"False 0"), (RESOLVER, b"True 9"), (JOB, b"True 9")],
)
async def test_group_and_parent_death_signal_follow_the_policy(
    policy: Policy, shown: bytes
) -> None:
    proc = await spawn([PY, "-c", _SHOW], policy, policy.inherited())
    code, out, _ = await _output(proc)
    assert (code, out.strip()) == (0, shown)


@pytest.mark.anyio
async def test_a_command_that_cannot_start_raises_oserror() -> None:
    with pytest.raises(FileNotFoundError):
        await spawn(["/nonexistent/program"], CHECK, {})


@pytest.mark.anyio
async def test_kill_group_ends_what_the_command_started_too() -> None:
    # the grandchild holds the stdout pipe: its end is seen when the pipe reaches EOF
    proc = await spawn(["sh", "-c", "sleep 60 & echo started; wait"], CHECK, CHECK.inherited())
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"started\n"
    kill_group(proc.pid)
    assert await proc.wait() == -signal.SIGKILL
    assert await proc.stdout.read() == b""  # every writer is gone


@pytest.mark.anyio
async def test_kill_group_takes_the_signal_asked_and_ignores_a_group_gone() -> None:
    proc = await spawn(["sleep", "60"], JOB, JOB.inherited())
    kill_group(proc.pid, signal.SIGTERM)
    assert await proc.wait() == -signal.SIGTERM
    kill_group(proc.pid)  # gone: nothing to signal, nothing raised


@pytest.mark.anyio
async def test_reap_kills_a_command_without_a_group_alone() -> None:
    proc = await spawn(["sleep", "60"], GIT, GIT.inherited())
    await reap(proc, GIT)
    assert proc.returncode == -signal.SIGKILL
    await reap(proc, GIT)  # ended already: nothing happens


@pytest.mark.anyio
async def test_reap_kills_the_group_and_drains_the_pipe() -> None:
    proc = await spawn(["sh", "-c", "sleep 60 & echo x; wait"], RESOLVER, RESOLVER.inherited())
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"x\n"
    await reap(proc, RESOLVER, drain_s=10.0)
    assert proc.returncode == -signal.SIGKILL and proc.stdout.at_eof()


@pytest.mark.anyio
async def test_reap_closes_a_pipe_held_outside_the_group() -> None:
    # setsid: the grandchild leads a session of its own, out of the group's reach; it says so
    # (its pid) only once it does
    script = "setsid sh -c 'echo $$; exec sleep 60' & exit 0"
    proc = await spawn(["sh", "-c", script], RESOLVER, RESOLVER.inherited())
    assert proc.stdout is not None
    held_by = int(await proc.stdout.readline())
    try:
        assert await proc.wait() == 0  # its exit is seen though the pipe is still held
        await reap(proc, RESOLVER, drain_s=0.1)
        transport = getattr(proc, "_transport")  # noqa: B009
        assert transport.is_closing()
    finally:
        os.kill(held_by, signal.SIGKILL)


@pytest.mark.anyio
async def test_read_capped_keeps_the_first_bytes_and_drains_the_rest() -> None:
    # 1 MiB: far past a pipe's buffer, so the command blocks unless it is drained
    proc = await spawn(["head", "-c", "1048576", "/dev/zero"], CHECK, CHECK.inherited())
    assert proc.stdout is not None
    assert await read_capped(proc.stdout, 10) == b"\0" * 10
    assert await proc.wait() == 0


@pytest.mark.anyio
async def test_read_capped_without_drain_stops_at_the_limit() -> None:
    proc = await spawn(["sh", "-c", "echo 0123456789; exec sleep 60"], RESOLVER, {})
    assert proc.stdout is not None
    assert await read_capped(proc.stdout, 4, drain=False) == b"0123"
    assert proc.returncode is None  # not waited for: it is still running
    await reap(proc, RESOLVER, drain_s=10.0)


@pytest.mark.anyio
async def test_read_capped_returns_a_short_reply_whole() -> None:
    proc = await spawn(["echo", "hi"], CHECK, CHECK.inherited())
    assert proc.stdout is not None
    assert await read_capped(proc.stdout, 4096, drain=False) == b"hi\n"
    assert await proc.wait() == 0
