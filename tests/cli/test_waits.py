"""The CLI's wait-for parts without processes: --wait-for, --reason and the why sentence."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dispatch.cli.doctor.checks import profile_checks, render
from dispatch.cli.waits import by_reason, conditions, when, why_line
from dispatch.client import JobView
from dispatch.errors import InvalidJob
from dispatch.gates.wait.state import WaitState
from dispatch.model import DeferRecord

NOW = int(datetime(2030, 3, 4, 10, 2, tzinfo=UTC).timestamp() * 1000)
MIN = 60_000


def test_wait_for_values_in_order_and_relative_afters_made_absolute() -> None:
    got = conditions(["profile=jira", "after=+10m", "after=2030-01-01T00:00:00+01:00"], NOW)
    assert got == [
        {"profile": "jira"},
        {"after": "2030-03-04T10:12:00.000Z"},
        {"after": "2030-01-01T00:00:00+01:00"},
    ]


@pytest.mark.parametrize(
    "bad", ["jira", "profile=", "after=", "after=tomorrow", "after=2030-01-01T00:00", "after=+x"]
)
def test_a_bad_wait_for_is_one_line(bad: str) -> None:
    with pytest.raises(InvalidJob) as caught:
        conditions([bad], NOW)
    assert "\n" not in str(caught.value) and bad in str(caught.value)


def test_jobs_filter_by_a_reason_pattern() -> None:
    def delayed(job_id: str, reason: str) -> JobView:
        return JobView(job_id, "jobs", "delayed", defer=DeferRecord(reason=reason, until="", at=""))

    views = [delayed("a", "wait-hold"), delayed("b", "scope-folder"), delayed("c", "wait-after")]
    assert [v.id for v in by_reason(views, "wait-*")] == ["a", "c"]
    assert by_reason(views, None) == views


def test_why_tells_a_held_wait_in_words() -> None:
    state = WaitState(
        since_ms=NOW,
        checks=14,
        answer="not yet",
        line="PROJ-12 still open",
        profile="jira",
        target="acme/web#7",
        next_ms=NOW + 45 * MIN,
        gives_up_ms=NOW + 24 * 60 * MIN,
    )
    assert why_line(state, NOW + 30 * MIN, UTC) == (
        "Waiting on `jira` for acme/web#7 since 10:02 (14 checks, last: not yet,"
        " 'PROJ-12 still open'); next check at 10:47; gives up at 10:02 tomorrow."
    )


def test_why_of_an_after_and_of_a_cleared_wait() -> None:
    ahead = WaitState(after_ms=NOW + 3 * 24 * 60 * MIN, label="an instant", target="site")
    assert why_line(ahead, NOW, UTC) == "It waits for site for its after instant, 2030-03-07 10:02."
    then = WaitState(after_ms=NOW + 5 * MIN, label="`jira`, `ci`")
    assert why_line(then, NOW, UTC) == (
        "It waits for its after instant, 10:07; then `jira`, `ci` is checked."
    )
    cleared = WaitState(cleared_ms=NOW - MIN, label="`jira`")
    assert why_line(cleared, NOW, UTC) == "Its wait on `jira` cleared at 10:01."
    assert when(NOW - 24 * 60 * MIN, NOW, UTC) == "10:02 yesterday"


def test_doctor_checks_each_declared_profile(tmp_path: Path) -> None:
    document = {
        "version": 1,
        "profiles": {"jira": {"command": ["/nonexistent/check"]}, "sh": {"command": ["sh"]}},
    }
    (tmp_path / "wait-profiles.json").write_text(json.dumps(document))
    checks = profile_checks(tmp_path)
    assert [(c.name, c.ok) for c in checks] == [("wait-profile", False), ("wait-profile", True)]
    assert "jira: /nonexistent/check is not found" in render(checks[0])
