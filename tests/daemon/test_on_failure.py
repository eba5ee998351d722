"""DISPATCH_ON_FAILURE on a real Redis with real commands: which endings qualify, the record on
the command's stdin, once fleet-wide however many hosts end the same run, and a command that
hangs or fails is logged, never retried."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dispatch.daemon.on_failure import OnFailure, qualifies
from dispatch.model import RunRecord
from dispatch.reasons import CANCELLED, COMPLETED, FAILED, INFRA, POLICY
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio


def record(outcome: str, **fields: object) -> RunRecord:
    base: dict[str, object] = {
        "id": "j1", "attempt": 2, "host": "h1", "queue": "jobs", "claim": "h1:7",
        "outcome": outcome, "reason": "exit-3",
    }  # fmt: skip
    return RunRecord(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("action", "found", "fires"),
    [
        ("finish", record(FAILED), True),
        ("finish", record(INFRA), True),  # finished, not retried: no attempt left
        ("retry", record(INFRA), False),
        ("finish", record(POLICY, budget_reserved=True), True),
        ("finish", record(POLICY), False),
        ("finish", record(COMPLETED), False),
        ("finish", record(CANCELLED), False),
        ("defer", record(INFRA), False),
        ("finish", None, False),
    ],
)
def test_which_endings_qualify(action: str, found: RunRecord | None, fires: bool) -> None:
    assert qualifies(action, found) is fires


def hook(tmp_path: Path, body: str = "") -> tuple[str, ...]:
    script = tmp_path / "hook.sh"
    out = tmp_path / "told"
    out.mkdir(exist_ok=True)
    script.write_text(f'#!/bin/sh\ncat > "{out}/$$.json"\n{body}\n')
    script.chmod(0o755)
    return (str(script),)


async def test_two_hosts_ending_one_run_tell_the_operator_once(redis, prefix, tmp_path) -> None:
    argv = hook(tmp_path)
    first = OnFailure(redis, prefix, "h1", argv, 5.0)
    second = OnFailure(redis, prefix, "h2", argv, 5.0)  # it settled the same run's record
    assert await first.fire(record(FAILED)) is True
    assert await second.fire(record(FAILED)) is False
    [told] = list((tmp_path / "told").iterdir())
    said = json.loads(told.read_text())  # the run record, as the mirror keeps it
    assert (said["id"], said["attempt"], said["claim"]) == ("j1", 2, "h1:7")
    assert (said["outcome"], said["reason"]) == (FAILED, "exit-3")
    assert await first.fire(record(FAILED, attempt=3, claim="h1:9")) is True  # another run


async def test_a_command_that_hangs_or_fails_is_logged(redis, prefix, tmp_path, logged) -> None:
    slow = OnFailure(redis, prefix, "h1", hook(tmp_path, "sleep 30"), 0.3)
    assert await slow.fire(record(FAILED)) is True
    failing = OnFailure(redis, prefix, "h1", hook(tmp_path, "exit 4"), 5.0)
    failing.ended("finish", record(INFRA, claim="h1:8"))  # in a task of its own
    await failing.settle()

    async def both() -> list[str] | None:
        lines = [json.loads(x) for x in logged.getvalue().splitlines() if x.startswith("{")]
        errors = [x["error"] for x in lines if x.get("event") == "on_failure_failed"]
        return errors if len(errors) == 2 else None

    assert await eventually(both, timeout=5) == ["timed out after 0.3 s", "exit 4"]
