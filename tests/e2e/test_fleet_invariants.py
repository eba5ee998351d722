"""Fleet invariants with three daemon processes (three host names) on one Redis.

Each job writes its start and end instants; the test checks the intervals: jobs on one folder
never overlap, a repo with `concurrent: 2` never runs three at once fleet-wide and does reach
two, and a model endpoint with one slot never serves two.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path

from tests.support.daemons import cli_env, daemon, dispatch, dispatch_json
from tests.support.polling import eventually_sync

HOSTS = ("h1", "h2", "h3")


def job_script(marks: Path, job_id: str, hold_s: float = 0.6) -> list[str]:
    at = f"{marks}/{job_id}"
    return ["sh", "-c", f"date +%s%N > {at}.start; sleep {hold_s}; date +%s%N > {at}.end"]


def intervals(marks: Path, ids: list[str]) -> list[tuple[int, int]]:
    return [
        (int((marks / f"{i}.start").read_text()), int((marks / f"{i}.end").read_text()))
        for i in ids
    ]


def most_at_once(spans: list[tuple[int, int]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = most = 0
    for _, step in edges:  # at a tie the end (-1) sorts first: touching is not overlapping
        running += step
        most = max(most, running)
    return most


def submit(env: dict[str, str], *args: str) -> str:
    done = dispatch(env, "submit", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def all_completed(env: dict[str, str], ids: list[str]) -> bool:
    states = {v["id"]: v["state"] for v in dispatch_json(env, "jobs")}
    assert not [i for i in ids if states.get(i) == "failed"], states
    return all(states.get(i) == "completed" for i in ids)


def test_folder_repo_and_endpoint_bounds_hold_across_three_daemons(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    config, marks, folder = tmp_path / "config", tmp_path / "marks", tmp_path / "site"
    for d in (config, marks, folder):
        d.mkdir()
    (config / "scoped-limits.json").write_text(
        json.dumps({"version": 1, "limits": [{"scope": "acme/web", "concurrent": 2}]})
    )
    endpoint = {"id": "gpu", "host": "gpu.internal", "slots": 1, "models": ["m1"]}
    (config / "model-endpoints.json").write_text(
        json.dumps({"version": 1, "endpoints": [endpoint]})
    )
    envs = [
        cli_env(
            redis_url, prefix, tmp_path / host, DISPATCH_HOST=host, DISPATCH_CONCURRENCY="3",
            DISPATCH_CONFIG_DIR=str(config), DISPATCH_LOCK_MS="3000",
            DISPATCH_STOP_GRACE="0.5s", DISPATCH_RENEW_EVERY="0.5s",
        )
        for host in HOSTS
    ]  # fmt: skip
    with ExitStack() as stack:
        for env in envs:
            stack.enter_context(daemon(env))
        h1 = envs[0]
        folder_ids = [f"folder-{n}" for n in range(3)]
        repo_ids = [f"repo-{n}" for n in range(6)]
        model_ids = [f"model-{n}" for n in range(3)]
        # One kind at a time, each held until all of it is in: its bound then meets more jobs
        # at once than it admits, however slowly a busy machine runs the submits and whichever
        # queue a host claims from first.
        phases: list[tuple[list[str], Callable[[str], list[str]]]] = [
            (folder_ids, lambda i: ["--folder", str(folder), "--", *job_script(marks, i)]),
            (repo_ids, lambda i: ["--repo", "acme/web", "--", *job_script(marks, i, 1.5)]),
            (model_ids, lambda i: ["--model", "m1", "--", *job_script(marks, i)]),
        ]
        for ids, args in phases:
            assert dispatch(h1, "pause").returncode == 0
            for i in ids:
                submit(h1, "--id", i, *args(i))
            assert dispatch(h1, "resume").returncode == 0
            eventually_sync(partial(all_completed, h1, ids), timeout=60, every=0.5)

    assert most_at_once(intervals(marks, folder_ids)) == 1
    assert most_at_once(intervals(marks, repo_ids)) == 2
    assert most_at_once(intervals(marks, model_ids)) == 1
    runs = dispatch_json(h1, "runs", "--limit", "100")
    by_id = {r["id"]: r["host"] for r in runs if r["outcome"] == "completed"}
    assert {by_id[i] for i in folder_ids} == {"h1"}  # a local folder stays on its host
    deferred = {v["id"]: (v["defer"] or {}).get("reason") for v in dispatch_json(h1, "jobs")}
    # more jobs than each bound admits: some of each kind waited, for the right reason
    assert "scope-folder" in {deferred[i] for i in folder_ids}
    assert "scope-repo" in {deferred[i] for i in repo_ids}
    assert "endpoint" in {deferred[i] for i in model_ids}
