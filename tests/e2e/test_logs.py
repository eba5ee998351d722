"""`dispatch logs` as an operator meets it: a job runs on host a, and from a machine that is not
a (its own host name and state dir, only the Redis in common) `logs -f` prints the output as
it comes, masked, and exits with the job's exit code; afterwards `logs` there prints the tail
Redis kept, and on a the whole file."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.daemons import SOURCE, cli_env, daemon, dispatch, wait_state
from tests.support.polling import eventually_sync

TOKEN = "ghp_" + "a1B2c3D4e5" * 4  # a credential shape the output mask knows


def test_logs_follow_from_another_machine_then_the_tail_there_and_the_file_here(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    here = cli_env(redis_url, prefix, tmp_path / "a", DISPATCH_HOST="a", DISPATCH_LOG_TAIL="4k")
    there = cli_env(redis_url, prefix, tmp_path / "b", DISPATCH_HOST="b")
    go = tmp_path / "go"
    script = (
        f"echo first line {TOKEN}; while [ ! -e {go} ]; do sleep 0.05; done;"
        " seq 1 3000; echo last line; exit 4"
    )
    followed = tmp_path / "followed"
    with daemon(here):
        job = dispatch(here, "submit", "--attempts", "1", "--", "sh", "-c", script).stdout.strip()
        wait_state(here, job, "active")
        with open(followed, "wb") as out, open(tmp_path / "follower.err", "wb") as err:
            follower = subprocess.Popen(
                [*SOURCE, "logs", "-f", job], env=there, stdout=out, stderr=err
            )
            try:
                eventually_sync(lambda: b"first line" in followed.read_bytes(), 20)
                assert follower.poll() is None  # still following a job still running
                go.touch()
                assert follower.wait(timeout=30) == 4, (tmp_path / "follower.err").read_text()
            finally:
                if follower.poll() is None:
                    follower.kill()
        wait_state(here, job, "failed")
    said = followed.read_bytes()
    assert said.startswith(b"first line ghp_***") and TOKEN.encode() not in said
    assert said.endswith(b"2999\n3000\nlast line\n")

    kept = dispatch(there, "logs", job)
    assert kept.returncode == 0 and kept.stdout.endswith("3000\nlast line\n")
    assert "first line" not in kept.stdout  # Redis keeps the newest 4k (whole chunks)
    whole = dispatch(here, "logs", job)
    assert whole.returncode == 0 and whole.stdout.startswith("first line ghp_***")
    assert whole.stdout.endswith("2999\n3000\nlast line\n") and "\n1\n2\n3\n" in whole.stdout
    if said.decode() != whole.stdout:  # 14 KB in one flush against a 4k tail: trimmed unread
        assert "skipped: Redis keeps only the newest" in (tmp_path / "follower.err").read_text()

    missing = dispatch(there, "logs", "no-such-job")
    assert missing.returncode == 1 and "no job no-such-job" in missing.stderr
