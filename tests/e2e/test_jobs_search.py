"""`dispatch jobs` search as an operator types it (issue 27): by id prefix, by what the job works
on, by age, by host, each state listed oldest first; a bad filter is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from dispatch.cli.filters import Filters
from dispatch.client import JobView
from dispatch.model import DeferRecord, Result
from tests.support.daemons import cli_env, dispatch


def ids(env: dict[str, str], *flags: str) -> list[str]:
    done = dispatch(env, "jobs", "--json", *flags)
    assert done.returncode == 0, done.stderr
    return [v["id"] for v in json.loads(done.stdout)]


def test_jobs_are_found_by_id_target_and_age_oldest_first(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    env = cli_env(redis_url, prefix, tmp_path / "state")
    site = tmp_path / "src" / "site"
    site.mkdir(parents=True)
    later = ("--after", "+1h")
    for args in (
        ("--id", "alpha-1", "--repo", "acme/web", "--number", "1", *later),
        ("--id", "beta-1", *later),
        ("--id", "alpha-2", "--folder", str(site), *later),
    ):
        assert dispatch(env, "submit", *args, "--", "true").returncode == 0
    assert ids(env) == ["alpha-1", "beta-1", "alpha-2"]  # oldest first, whatever the queue
    assert ids(env, "--id", "alpha") == ["alpha-1", "alpha-2"]
    assert ids(env, "--target", "ACME/web") == ["alpha-1"]
    assert ids(env, "--target", "site") == ["alpha-2"]
    assert ids(env, "--since", "1h", "--id", "beta") == ["beta-1"]
    shown = dispatch(env, "jobs", "--target", "acme/web").stdout
    assert "alpha-1" in shown and "beta-1" not in shown
    bad = dispatch(env, "jobs", "--since", "soon")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--since" in bad.stderr


def test_host_means_running_deferred_or_ended_there() -> None:
    defer = DeferRecord(reason="host-slot", until="", at="", host="h2")
    ended = Result(state="failed", outcome="infra", reason="x", host="h3", ended_at="")
    views = [
        JobView("a", "jobs", "active", owner="h1"),
        JobView("b", "jobs", "delayed", defer=defer),
        JobView("c", "jobs", "failed", result=ended),
    ]
    for host, found in (("h1", ["a"]), ("h2", ["b"]), ("h3", ["c"]), ("h4", [])):
        assert [v.id for v in views if Filters(host=host).keep(v)] == found
