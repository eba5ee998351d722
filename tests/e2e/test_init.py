"""`dispatch init` and the doctor's config check, through the CLI as an operator runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dispatch.cli.doctor.checks import config_checks
from dispatch.config.schemas import FILES, ConfigSnapshot
from dispatch.config.watcher import load_once
from tests.support.daemons import cli_env, dispatch


@pytest.fixture
def env(prefix: str, tmp_path: Path) -> dict[str, str]:
    return cli_env(None, prefix, tmp_path / "state", DISPATCH_CONFIG_DIR=str(tmp_path / "cfg"))


def test_init_writes_every_file_then_keeps_them(env: dict[str, str], tmp_path: Path) -> None:
    config_dir = tmp_path / "cfg"
    first = dispatch(env, "init")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [f"wrote {config_dir / name}" for name in FILES]
    assert load_once(config_dir) == ConfigSnapshot()

    (config_dir / "projects.json").write_text('{"version": 1, "projects": [{"id": "web"}]}')
    (config_dir / "triggers.json").unlink()
    again = dispatch(env, "init")
    assert again.returncode == 0, again.stderr
    assert f"wrote {config_dir / 'triggers.json'}" in again.stdout.splitlines()
    assert again.stdout.count("kept ") == len(FILES) - 1
    assert json.loads((config_dir / "projects.json").read_text())["projects"] == [{"id": "web"}]


def test_init_exits_1_with_one_line_when_the_dir_cannot_be_made(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "plain-file").write_text("")
    done = dispatch({**env, "DISPATCH_CONFIG_DIR": str(tmp_path / "plain-file" / "cfg")}, "init")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("dispatch: ") and done.stderr.count("\n") == 1


def test_doctor_names_a_broken_and_a_newer_file(
    env: dict[str, str], tmp_path: Path, redis_url: str
) -> None:
    assert dispatch(env, "init").returncode == 0
    (tmp_path / "cfg" / "projects.json").write_text('{"version": 1, "projects": [{"id": 7}]}')
    (tmp_path / "cfg" / "settings.json").write_text('{"version": 2}')
    done = dispatch({**env, "DISPATCH_REDIS_URL": redis_url}, "doctor")
    assert done.returncode == 1
    config = [line.split(None, 2) for line in done.stdout.splitlines() if " config " in line]
    assert [(mark, detail.split(":")[0]) for mark, _, detail in config] == [
        ("FAIL", "projects.json"),
        ("FAIL", "settings.json"),
    ]
    assert "Expected `str`" in config[0][2] and "newer release" in config[1][2]


def test_the_config_check_counts_missing_files(tmp_path: Path) -> None:
    (only,) = config_checks(tmp_path / "cfg")
    assert (only.ok, only.detail) == (True, f"{len(FILES)} files, {len(FILES)} missing")
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "projects.json").write_text('{"version": 1}')
    (only,) = config_checks(tmp_path / "cfg")
    assert (only.ok, only.detail) == (True, f"{len(FILES)} files, {len(FILES) - 1} missing")
