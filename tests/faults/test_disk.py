"""A full disk under a real daemon process: the run log and the captured output cannot be
written, and yet every job ends as its own exit says, once, and the daemon stays up.

Two disks: `runs.jsonl` linked to /dev/full (ENOSPC on every write; no root needed), and a
64 KiB tmpfs as the whole state dir, filled before the daemon starts (root: it mounts). Each
job notes its run in a marker file outside the state dir, so a job run twice shows. A job
whose claim never ended would be swept back and run again once its lock lapsed (3 s here).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatch.model import RunRecord
from dispatch.records.disk_log import RecordLog, encode
from tests.support.daemons import (
    cli_env,
    daemon,
    dispatch,
    dispatch_json,
    stopped_log,
    wait_state,
)

pytestmark = pytest.mark.slow


def fill(path: Path) -> None:
    """Write to `path` until the disk is full."""
    with path.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, unmounted at the end whatever happened."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("mounting a tmpfs needs root")
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def submit(env: dict[str, str], marker: Path) -> str:
    done = dispatch(env, "submit", "--", "sh", "-c", f"echo run >> {marker}; echo output")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_run_log_that_cannot_be_written_never_keeps_a_job_from_ending(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    state, marker = tmp_path / "state", tmp_path / "marker"
    state.mkdir()
    (state / "runs.jsonl").symlink_to("/dev/full")
    env = cli_env(redis_url, prefix, state, DISPATCH_LOCK_MS="3000")
    with daemon(env) as proc:
        first = submit(env, marker)
        assert wait_state(env, first, "completed", "failed") == "completed"
        second = submit(env, marker)  # the lane goes on
        assert wait_state(env, second, "completed", "failed") == "completed"
        assert proc.poll() is None
        log = stopped_log(proc, env)
    assert marker.read_text() == "run\nrun\n"  # each ran once
    assert sorted(r["id"] for r in dispatch_json(env, "runs")) == sorted([first, second])
    assert log.count('"event":"run_log_write_failed"') == 1  # once per streak


def test_a_full_state_dir_loses_records_and_output_not_jobs(
    redis_url: str, prefix: str, tmp_path: Path, small_disk: Path
) -> None:
    marker = tmp_path / "marker"
    fill(small_disk / "filler")
    env = cli_env(redis_url, prefix, small_disk, DISPATCH_LOCK_MS="3000")
    with daemon(env) as proc:
        first = submit(env, marker)
        assert wait_state(env, first, "completed", "failed") == "completed"
        (record,) = dispatch_json(env, "runs")
        assert (record["outcome"], record["output_lost"]) == ("completed", True)
        (small_disk / "filler").unlink()  # space again: the next record is written
        second = submit(env, marker)
        assert wait_state(env, second, "completed", "failed") == "completed"
        assert proc.poll() is None
        log = stopped_log(proc, env)
    assert marker.read_text() == "run\nrun\n"
    assert '"event":"run_log_write_recovered"' in log
    local = RecordLog(small_disk)
    (kept,) = local.read()
    assert kept.id == second and kept.output is not None
    assert Path(kept.output).read_text() == "output\n"


def test_a_write_cut_short_by_a_full_disk_tears_one_line_only(small_disk: Path) -> None:
    (small_disk / "half").write_bytes(b"\0" * 32 * 1024)
    runs = RecordLog(small_disk)
    try:
        assert not runs.append(record(n) for n in range(1000))  # ~70 KiB: more than is left
        written = runs.path.read_bytes()
        assert written and not written.endswith(b"\n")  # some went in: the last line is torn
        (small_disk / "half").unlink()
        assert runs.append([record(9999)])
    finally:
        runs.close()
    ids = [r.id for r in runs.read()]
    assert ids[-1] == "j9999"
    assert ids[:-1] == [f"j{n}" for n in range(written.count(b"\n"))]  # every whole line


def record(n: int) -> bytes:
    return encode(RunRecord(id=f"j{n}", attempt=1, host="h", queue="jobs", outcome="completed"))
