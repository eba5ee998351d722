"""A new user's first local job (issue 27): with no folder allowed on this host, `dispatch
submit --folder` is refused at once, in one line that says how to allow it, instead of being
accepted and refused `folder-not-allowed` when it runs; `dispatch doctor` warns of it."""

from __future__ import annotations

from pathlib import Path

from tests.support.daemons import cli_env, dispatch


def test_a_local_job_no_root_allows_is_refused_at_submit_with_the_fix(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    site = tmp_path / "src" / "site"
    site.mkdir(parents=True)
    env = cli_env(redis_url, prefix, tmp_path / "state", DISPATCH_RUNNER="docker")
    refused = dispatch(env, "submit", "--folder", str(site), "--", "true")
    assert refused.returncode == 2 and refused.stdout == ""
    [line] = refused.stderr.strip().splitlines()
    assert f"DISPATCH_ALLOWED_ROOTS={tmp_path / 'src'}" in line
    assert f"dispatch up --allow {tmp_path / 'src'}" in line
    assert dispatch(env, "jobs", "--json").stdout.strip() == "[]"  # nothing was written

    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    env["DISPATCH_ALLOWED_ROOTS"] = str(elsewhere)
    outside = dispatch(env, "submit", "--folder", str(site), "--", "true")
    assert outside.returncode == 2 and "is not a directory under" in outside.stderr

    env["DISPATCH_ALLOWED_ROOTS"] = str(tmp_path / "src")
    accepted = dispatch(env, "submit", "--folder", str(site), "--", "true")
    assert accepted.returncode == 0, accepted.stderr


def test_doctor_warns_when_no_folder_is_allowed(redis_url: str, prefix: str, tmp_path: Path):
    env = cli_env(redis_url, prefix, tmp_path / "state", DISPATCH_RUNNER="docker")
    lines = dispatch(env, "doctor").stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("warn") and "allowed-roots" in ln]
    env["DISPATCH_ALLOWED_ROOTS"] = str(tmp_path)
    lines = dispatch(env, "doctor").stdout.splitlines()
    assert not [ln for ln in lines if "allowed-roots" in ln]


def test_up_refuses_an_allow_that_is_not_a_directory(tmp_path: Path) -> None:
    env = cli_env(None, "p", tmp_path / "state")
    done = dispatch(env, "up", "--allow", str(tmp_path / "missing"))
    assert done.returncode == 2 and done.stderr.strip() == (
        f"dispatch: --allow {tmp_path / 'missing'}: not a directory"
    )
