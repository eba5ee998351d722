"""dockerd restarts while a job runs, with a real daemon process and a real dockerd.

The dockerd here is the module's own (tests/support/dockerd.py), started once, restarted by
the tests and always removed at the end, so the machine's engine and the tests using it are
never disturbed. Each job works in a local folder: it notes each run in a marker file, prints
`before`, waits for the test's `go` file, prints `after`, and exits 0.

With live-restore the container keeps running across the restart: the run is re-adopted and
recorded once, completed (one attempt only, so any infra ending would fail the job). Without
it, dockerd stops the container as it shuts down; the job here exits 0 on SIGTERM, which must
not count as done: the attempt ends infra `engine-restarted` and the job runs again.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemons import (
    cli_env,
    daemon,
    daemon_log,
    dispatch,
    dispatch_json,
    stopped_log,
    wait_state,
)
from tests.support.docker import IMAGE
from tests.support.dockerd import PrivateEngine, missing_tools
from tests.support.polling import eventually_sync

pytestmark = pytest.mark.slow

JOB = (
    "echo ran >> /work/marker; {trap}echo before; "
    "while [ ! -e /work/go ]; do sleep 0.1; done; echo after"
)


@pytest.fixture(scope="module")
def engine(docker_host: str) -> Iterator[PrivateEngine]:
    problem = missing_tools()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    own = PrivateEngine(Path(tempfile.mkdtemp(prefix="dk")))  # short: a socket path is <108
    try:
        own.start(live_restore=True)
        own.load_image(docker_host, IMAGE)
        yield own
    finally:
        own.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    os.chown(work, 65534, 65534)  # the job runs as its folder's owner, never as root
    return work


@pytest.fixture
def env(
    engine: PrivateEngine, redis_url: str, prefix: str, tmp_path: Path, host_label: str
) -> dict[str, str]:
    return cli_env(
        redis_url,
        prefix,
        tmp_path / "state",
        DISPATCH_RUNNER="docker",
        DOCKER_HOST=engine.host,
        DISPATCH_HOST=host_label,
        DISPATCH_IMAGE=IMAGE,
        DISPATCH_ALLOWED_ROOTS=str(tmp_path),
        DISPATCH_LOCK_MS="4500",  # 3 x (stop grace + renewal period)
        DISPATCH_SHUTDOWN_GRACE="1s",
        DISPATCH_STOP_GRACE="1s",
        # its bridges live in its own network namespace, where the daemon's egress proxy cannot
        # listen (as under rootless Docker): the job network is the operator's to name there
        DISPATCH_CONTAINER_NETWORK="bridge",
    )


def submit(env: dict[str, str], folder: Path, attempts: int, trap: str = "") -> str:
    script = JOB.format(trap=trap)
    done = dispatch(
        env, "submit", "--folder", str(folder), "--force", "--attempts", str(attempts),
        "--", "sh", "-c", script,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def output_of(env: dict[str, str], job_id: str, attempt: int) -> Path:
    """The attempt's output file, once its run has opened it (`<job>.<attempt>.<fence>.log`)."""
    folder = Path(env["DISPATCH_STATE_DIR"]) / "output"
    return eventually_sync(lambda: next(folder.glob(f"{job_id}.{attempt}.*.log"), None), 60)


def wait_output(path: Path, text: bytes) -> None:
    eventually_sync(lambda: path.exists() and text in path.read_bytes(), 60)


def runs(env: dict[str, str]) -> list[tuple[int, str, str]]:
    return sorted(
        (r["attempt"], r["outcome"], r.get("reason", "")) for r in dispatch_json(env, "runs")
    )


def test_with_live_restore_the_run_is_readopted_and_recorded_once(
    engine: PrivateEngine, env: dict[str, str], folder: Path
) -> None:
    engine.restart(live_restore=True)
    with daemon(env) as proc:
        job_id = submit(env, folder, attempts=1)
        wait_output(output_of(env, job_id, 1), b"before\n")
        engine.restart(live_restore=True)
        # the job ends only once the run is re-adopted: an exit while the runner is away cannot
        # be told from one the restart caused, and is rightly not believed
        eventually_sync(lambda: "container_readopted" in daemon_log(env), 60)
        (folder / "go").touch()
        assert wait_state(env, job_id, "completed", "failed", timeout=60) == "completed"
        stopped_log(proc, env)
    assert runs(env) == [(1, "completed", "")]
    assert (folder / "marker").read_text() == "ran\n"  # it ran once
    assert output_of(env, job_id, 1).read_bytes() == b"before\nafter\n"


def test_without_live_restore_the_job_goes_back_as_infra_and_runs_again(
    engine: PrivateEngine, env: dict[str, str], folder: Path
) -> None:
    engine.restart(live_restore=False)
    with daemon(env):
        job_id = submit(env, folder, attempts=2, trap="trap 'exit 0' TERM; ")
        wait_output(output_of(env, job_id, 1), b"before\n")
        engine.restart(live_restore=False)  # stops the container: SIGTERM, and it exits 0
        eventually_sync(lambda: runs(env) == [(1, "infra", "engine-restarted")], 60)
        (folder / "go").touch()
        assert wait_state(env, job_id, "completed", "failed", timeout=60) == "completed"
    assert runs(env) == [(1, "infra", "engine-restarted"), (2, "completed", "")]
    assert (folder / "marker").read_text() == "ran\nran\n"
