"""Resolving references: command and file profiles, their failures, and an abort mid-way."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from dispatch.config.schemas import SecretProfile
from dispatch.model import SecretRef
from dispatch.runners.base import AbortSignal
from dispatch.secrets.resolver import Aborted, Unresolved, resolve, resolve_one
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio

VALUE = "tok-8f3b2c9a1d"


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def private_file(tmp_path: Path, content: object, mode: int = 0o600) -> str:
    path = tmp_path / "secrets.private.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    path.chmod(mode)
    return str(path)


async def one(ref: str, profile: SecretProfile, abort: AbortSignal | None = None) -> str:
    return await resolve_one(SecretRef(secret=ref), {"p": profile}, abort or AbortSignal())


async def test_a_command_prints_the_value_for_the_name_in_its_argv(tmp_path: Path) -> None:
    printer = script(tmp_path, "print", 'printf "%s-%s\\n" "$1" "$2"')
    assert await one("p/gh/token", SecretProfile(command=[printer, "{name}", "x"])) == "gh/token-x"


async def test_a_command_sees_only_path_and_home(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LEAKY_TOKEN", "do-not-pass")
    value = await one("p/any", SecretProfile(command=["env"]))
    assert sorted(line.partition("=")[0] for line in value.splitlines()) == ["HOME", "PATH"]


async def test_a_failed_command_says_how_without_its_output(tmp_path: Path) -> None:
    loud = script(tmp_path, "loud", f"echo {VALUE}; echo {VALUE} >&2; exit 3")
    with pytest.raises(Unresolved) as caught:
        await one("p/x", SecretProfile(command=[loud]))
    assert str(caught.value) == "p/x: loud exited 3"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("true", "under 4 characters"),
        ("printf abc", "under 4 characters"),
        ("printf 'ab\\0cd'", "NUL"),
        ("printf '\\377\\376xx'", "not UTF-8"),
        ("head -c 70000 /dev/zero | tr '\\0' a", "more than 65536 bytes"),
    ],
)
async def test_a_value_that_cannot_be_passed_or_masked_is_refused(
    tmp_path: Path, body: str, why: str
) -> None:
    with pytest.raises(Unresolved, match=why):
        await one("p/x", SecretProfile(command=[script(tmp_path, "s", body)]))


async def test_a_missing_command_is_unresolved(tmp_path: Path) -> None:
    with pytest.raises(Unresolved, match="cannot start"):
        await one("p/x", SecretProfile(command=[str(tmp_path / "nope")]))


async def test_a_slow_command_is_killed_at_its_timeout(tmp_path: Path) -> None:
    slow = script(tmp_path, "slow", "sleep 30")
    started = time.monotonic()
    with pytest.raises(Unresolved, match=r"timed out after 0\.3s"):
        await one("p/x", SecretProfile(command=[slow], timeout_ms=300))
    assert time.monotonic() - started < 5


async def test_an_abort_kills_the_resolver_and_everything_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    slow = script(tmp_path, "slow", f"sleep 60 & echo $! > {pid_file}; wait")
    abort = AbortSignal()
    task = asyncio.ensure_future(
        one("p/x", SecretProfile(command=[slow], timeout_ms=60_000), abort)
    )

    async def started() -> str | None:
        return pid_file.read_text().strip() if pid_file.exists() else None

    child = int(await eventually(started, 10))
    abort.abort("operator-cancel")
    with pytest.raises(Aborted):
        await asyncio.wait_for(task, 5)

    async def gone() -> bool:
        return not _alive(child)

    await eventually(gone, 5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.split(") ", 1)[1][0] != "Z"  # a zombie has already died


async def test_an_aborted_run_resolves_nothing() -> None:
    abort = AbortSignal()
    abort.abort("operator-cancel")
    with pytest.raises(Aborted):
        await one("p/x", SecretProfile(command=["true"]), abort)


async def test_a_private_file_gives_the_named_value(tmp_path: Path) -> None:
    path = private_file(tmp_path, {"gh": VALUE, "other": "zzzz"})
    assert await one("p/gh", SecretProfile(file=path)) == VALUE


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o644])
async def test_a_file_others_may_use_is_not_read(tmp_path: Path, mode: int) -> None:
    path = private_file(tmp_path, {"gh": VALUE}, mode)
    with pytest.raises(Unresolved) as caught:
        await one("p/gh", SecretProfile(file=path))
    assert f"mode {mode:04o}" in str(caught.value) and "chmod 600" in str(caught.value)
    assert VALUE not in str(caught.value) and path not in str(caught.value)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ({"other": VALUE}, "has no 'gh'"),
        (f'{{"gh": "{VALUE}", ', "not a JSON object of string values"),
        ({"gh": 7}, "not a JSON object of string values"),
    ],
)
async def test_a_file_without_the_name_or_not_json_is_unresolved(
    tmp_path: Path, content: object, why: str
) -> None:
    with pytest.raises(Unresolved, match=why) as caught:
        await one("p/gh", SecretProfile(file=private_file(tmp_path, content)))
    assert VALUE not in str(caught.value)


async def test_a_missing_file_or_directory_is_unresolved(tmp_path: Path) -> None:
    with pytest.raises(Unresolved, match="cannot be opened"):
        await one("p/gh", SecretProfile(file=str(tmp_path / "nope.json")))
    with pytest.raises(Unresolved, match="not a regular file"):
        await one("p/gh", SecretProfile(file=str(tmp_path)))


async def test_every_reference_resolved_once_and_an_undeclared_profile_unresolved(
    tmp_path: Path,
) -> None:
    counter = tmp_path / "calls"
    counting = script(tmp_path, "count", f"echo x >> {counter}; echo value-$1")
    profiles = {"c": SecretProfile(command=[counting, "{name}"])}
    refs = {"A": SecretRef(secret="c/one"), "B": SecretRef(secret="c/one")}
    refs["C"] = SecretRef(secret="c/two")
    values = await resolve(refs, profiles, AbortSignal())
    assert values == {"A": "value-one", "B": "value-one", "C": "value-two"}
    assert counter.read_text().count("x") == 2
    with pytest.raises(Unresolved, match="profile 'gone' is not declared"):
        await resolve({"A": SecretRef(secret="gone/x")}, profiles, AbortSignal())
