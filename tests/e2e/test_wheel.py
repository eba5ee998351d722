"""The wheel as an operator installs it: built from this checkout, installed into a fresh venv,
run from outside the source tree. Its CLI must find the Lua scripts the wheel carries."""

from __future__ import annotations

import signal
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.support.daemons import cli_env, daemon, dispatch, wait_state

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run(list(map(str, args)), cwd=cwd, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def build_wheel(out: Path) -> Path:
    """The wheel built the way a release is: from the sdist, so both must carry lua/.
    Hatchling comes from the index into an isolated build env: PyPI is all CI can reach."""
    run(sys.executable, "-m", "build", "--outdir", out, REPO, cwd=out.parent)
    (wheel,) = out.glob("dispatch-*.whl")
    return wheel


def lend_dependencies(venv: Path) -> None:
    """Let the new venv import redis, msgspec, ... from this one instead of fetching them again.
    A plain path line, not a site dir: this venv's own .pth (the editable checkout) stays out."""
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    own = run(venv / "bin" / "python", "-c", code, cwd=venv)
    lent = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (Path(own) / "lent_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(lent)))


class Installed(NamedTuple):
    program: tuple[str]  # the console script the wheel installed
    package: Path  # the folder `import dispatch` found


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A fresh venv holding only the wheel (its dependencies lent), built once for the module."""
    root = tmp_path_factory.mktemp("wheel")
    venv, python = root / "venv", root / "venv" / "bin" / "python"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=root)
    wheel = build_wheel(root / "dist")
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "-q",
        "--no-deps",
        wheel,
        cwd=root,
    )
    lend_dependencies(venv)
    # `python -c` puts the cwd first on sys.path: from the checkout, this would import it instead
    module = run(python, "-c", "import dispatch; print(dispatch.__file__)", cwd=root)
    assert Path(module).is_relative_to(venv), module
    return Installed((str(venv / "bin" / "dispatch"),), Path(module).parent)


@pytest.fixture
def env(
    redis_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    monkeypatch.chdir(tmp_path)  # every CLI call runs away from the checkout
    env = cli_env(redis_url, prefix, tmp_path / "state")
    env.pop("PYTHONPATH", None)  # nothing may lead the install back to the checkout
    return env


def doctor_lines(stdout: str) -> dict[str, tuple[str, str]]:
    """check name -> (mark, detail), from the doctor's `mark  name  detail` lines."""
    return {
        name: (mark, detail)
        for mark, name, detail in (ln.split(None, 2) for ln in stdout.splitlines())
    }


def test_doctor_finds_the_scripts_inside_the_installed_package(
    installed: Installed, env: dict[str, str], tmp_path: Path
) -> None:
    # no engine at this address, so the docker line fails the same way on every machine
    no_engine = {**env, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    done = dispatch(no_engine, "doctor", program=installed.program)
    lines = doctor_lines(done.stdout)
    assert lines["redis"][0] == "ok", done.stdout
    count = len(list((REPO / "lua").glob("*.lua")))
    assert lines["scripts"] == ("ok", f"{count} loaded from {installed.package / 'lua'}")
    failed = [name for name, (mark, _) in lines.items() if mark == "FAIL"]
    assert (done.returncode, failed) == (1, ["docker"]), done.stdout


def test_the_installed_package_renders_its_unit_from_its_own_template(
    installed: Installed, env: dict[str, str]
) -> None:
    assert (installed.package / "deploy" / "dispatch.service.in").is_file()
    done = dispatch(env, "service", "render", program=installed.program)
    assert done.returncode == 0, done.stderr
    assert "Type=notify" in done.stdout.splitlines() and "@" not in done.stdout


def test_the_installed_worker_runs_a_job_and_stops_cleanly(
    installed: Installed, env: dict[str, str]
) -> None:
    program = installed.program
    with daemon(env, program=program) as worker:
        submitted = dispatch(env, "submit", "--", "sh", "-c", "echo hi", program=program)
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        assert wait_state(env, job_id, "completed", "failed", program=program) == "completed"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=40) == 0
