"""Config files as an operator edits them under a running daemon: pause windows, a broken file
(the last good copy holds), a newer-version file (holds work until fixed), and `dispatch why`."""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemons import cli_env, daemon, dispatch, dispatch_json, wait_state
from tests.support.polling import eventually_sync


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    path.mkdir()
    return path


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path, config: Path) -> dict[str, str]:
    return cli_env(
        redis_url, prefix, tmp_path / "state", DISPATCH_HOST="cfg-host",
        DISPATCH_CONFIG_DIR=str(config),
    )  # fmt: skip


def write(path: Path, document: Any) -> None:
    """Replace the file in one step, as an editor or a deploy tool would."""
    temp = path.with_suffix(".tmp")
    temp.write_text(document if isinstance(document, str) else json.dumps(document))
    os.replace(temp, path)


def iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def view(env: dict[str, str], job_id: str) -> dict[str, Any]:
    return next(v for v in dispatch_json(env, "jobs") if v["id"] == job_id)


def held_for(env: dict[str, str], job_id: str, reason: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        v = view(env, job_id)
        return v if v["state"] == "delayed" and v["reason"] == reason else None

    return eventually_sync(check, 30)


def test_a_pause_window_defers_a_job_why_names_it_and_it_runs_after(
    env: dict[str, str], config: Path
) -> None:
    # the job waits before the daemon starts, and the window outlasts a slow start on a busy
    # host (4 s did not, in CI): it must be picked up inside the window to be held at all
    end = time.time() + 12
    window = {"scope": "*", "start": iso(time.time() - 60), "end": iso(end)}
    write(config / "pause-windows.json", {"version": 1, "windows": [window]})
    job_id = dispatch(env, "submit", "--", "true").stdout.strip()
    with daemon(env):
        held = held_for(env, job_id, "pause-window")
        assert held["defer"]["host"] == "cfg-host"
        why = dispatch(env, "why", job_id)
        assert why.returncode == 0
        assert "pause-window" in why.stdout and "paused by window" in why.stdout
        wait_state(env, job_id, "completed")
    (run,) = dispatch_json(env, "runs")
    started = datetime.fromisoformat(run["started_at"]).timestamp()
    assert started >= int(end)  # not before the window closed (its end, to the second)


def test_a_broken_file_keeps_the_last_good_copy_until_it_is_fixed(
    env: dict[str, str], config: Path
) -> None:
    window = {"scope": "*", "start": iso(time.time() - 60), "end": iso(time.time() + 3600)}
    write(config / "pause-windows.json", {"version": 1, "windows": [window]})
    with daemon(env):
        job_id = dispatch(env, "submit", "--", "true").stdout.strip()
        first = held_for(env, job_id, "pause-window")
        write(config / "pause-windows.json", '{"version": 1, "windows": [')
        doctor = dispatch(env, "doctor")
        assert "pause-windows.json" in doctor.stdout and doctor.returncode == 1
        # the change made the daemon look again; the last good copy still pauses it
        eventually_sync(lambda: view(env, job_id)["defer"]["at"] != first["defer"]["at"], 30)
        assert held_for(env, job_id, "pause-window")["state"] == "delayed"
        write(config / "pause-windows.json", {"version": 1, "windows": []})
        wait_state(env, job_id, "completed")  # long before the old window's end


def test_a_newer_version_file_holds_work_which_resumes_when_it_is_fixed(
    env: dict[str, str], config: Path
) -> None:
    write(config / "projects.json", {"version": 2, "projects": []})
    with daemon(env):
        job_id = dispatch(env, "submit", "--", "true").stdout.strip()
        held = held_for(env, job_id, "newer-release")
        assert "projects.json" in held["defer"]["detail"]
        assert "newer release" in dispatch(env, "why", job_id).stdout
        write(config / "projects.json", {"version": 1, "projects": []})
        wait_state(env, job_id, "completed")  # within seconds, not the 10-minute re-check


def test_a_broken_settings_overlay_refuses_the_job(env: dict[str, str], config: Path) -> None:
    write(config / "settings.json", {"version": 1, "settings": {"jobCpus": "many"}})
    with daemon(env):
        job_id = dispatch(env, "submit", "--", "true").stdout.strip()
        wait_state(env, job_id, "failed")
    (run,) = dispatch_json(env, "runs")
    assert (run["outcome"], run["reason"]) == ("policy", "settings-overlay-invalid")


def dirty_repo(tmp_path: Path) -> Path:
    """A git work tree `site` with one committed file changed since."""
    repo = tmp_path / "site"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "index.html").write_text("v1\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "v1"], check=True)
    (repo / "index.html").write_text("v2, not committed\n")
    return repo


def test_a_dirty_folder_is_refused_unless_forced(env: dict[str, str], tmp_path: Path) -> None:
    repo = dirty_repo(tmp_path)
    with daemon(env):
        refused = dispatch(env, "submit", "--folder", str(repo), "--", "true").stdout.strip()
        wait_state(env, refused, "failed")
        forced = dispatch(env, "submit", "--force", "--folder", str(repo), "--", "true")
        wait_state(env, forced.stdout.strip(), "completed")
    runs = {r["id"]: r for r in dispatch_json(env, "runs")}
    assert (runs[refused]["outcome"], runs[refused]["reason"]) == ("policy", "dirty-tree")
    why = dispatch(env, "why", refused).stdout
    assert "dirty-tree" in why


def test_a_refusal_says_why_in_plain_words_wherever_it_is_read(
    env: dict[str, str], tmp_path: Path
) -> None:
    repo = dirty_repo(tmp_path)
    with daemon(env):
        job_id = dispatch(env, "submit", "--folder", str(repo), "--", "true").stdout.strip()
        wait_state(env, job_id, "failed")
    said = "site has uncommitted changes"
    story = dispatch_json(env, "why", job_id)
    assert said in story["result"]["sentence"] and story["sentence"] == story["result"]["sentence"]
    assert f"Why (dirty tree): {said}" in dispatch(env, "why", job_id).stdout
    (run,) = dispatch_json(env, "runs")
    assert run["sentence"] == story["sentence"]
    (line,) = [row for row in dispatch(env, "runs").stdout.splitlines() if job_id in row]
    assert "dirty-tree" in line and line.endswith(story["sentence"])
    local_log = (tmp_path / "state" / "runs.jsonl").read_text().splitlines()
    (local,) = [json.loads(row) for row in local_log]
    assert local["sentence"] == story["sentence"]
