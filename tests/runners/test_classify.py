"""The exit-to-outcome table (pure logic; the real runners are tested end to end elsewhere)."""

from __future__ import annotations

from typing import TypedDict

import pytest

from dispatch.runners.base import RunResult, classify


class Started(TypedDict):
    started: bool
    started_ms: int
    ended_ms: int


STARTED: Started = {"started": True, "started_ms": 1, "ended_ms": 2}


@pytest.mark.parametrize(
    ("result", "abort", "expected"),
    [
        (RunResult(exit_code=0, **STARTED), "", ("completed", "")),
        (RunResult(exit_code=2, **STARTED), "", ("policy", "job-refused")),
        (RunResult(exit_code=1, **STARTED), "", ("infra", "exit-1")),
        (RunResult(exit_code=137, kill="oom", **STARTED), "", ("infra", "oom")),
        (RunResult(error="docker-unavailable", **STARTED), "", ("infra", "docker-unavailable")),
        (RunResult(**STARTED), "", ("infra", "exit-unknown")),
        (RunResult(started=False, error="docker-unavailable"), "", ("infra", "docker-unavailable")),
        (RunResult(started=False, refusal="image-missing"), "", ("policy", "image-missing")),
        (RunResult(exit_code=143, **STARTED), "operator-cancel", ("cancelled", "operator-cancel")),
        (RunResult(exit_code=137, **STARTED), "job-timeout", ("failed", "job-timeout")),
        (RunResult(exit_code=137, **STARTED), "lock-lost", ("infra", "lock-lost")),
        (RunResult(exit_code=0, **STARTED), "shutdown", ("infra", "shutdown")),
    ],
)
def test_outcome_of_each_kind_of_ending(
    result: RunResult, abort: str, expected: tuple[str, str]
) -> None:
    assert classify(result, abort) == expected
