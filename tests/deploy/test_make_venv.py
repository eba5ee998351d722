"""scripts/lib.sh's `make_venv`, which the test command and the install script call: the venv
goes on Debian's python3 (built with profile-guided and link-time optimization) even when
another python3 comes first on PATH, as pyenv's shims do; `DISPATCH_PYTHON` names another."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DEBIAN = Path("/usr/bin/python3")


def debian_python_311() -> bool:
    if not DEBIAN.exists():
        return False
    newer = [str(DEBIAN), "-c", "import sys; sys.exit(sys.version_info < (3, 11))"]
    return subprocess.run(newer, check=False).returncode == 0


def make_venv(cwd: Path, **env: str) -> str:
    """Run make_venv in `cwd`; the interpreter's directory the venv was made on."""
    cwd.mkdir()
    done = subprocess.run(
        ["bash", "-c", f". {ROOT}/scripts/lib.sh && make_venv"],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    config = (cwd / ".venv" / "pyvenv.cfg").read_text().splitlines()
    return dict(line.split(" = ", 1) for line in config if " = " in line)["home"]


def python3_first_on_path(tmp_path: Path) -> str:
    """A PATH whose first python3 is this test's own interpreter, not Debian's."""
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3").symlink_to(sys.executable)
    return f"{shims}:{os.environ['PATH']}"


@pytest.mark.skipif(not debian_python_311(), reason="no Debian python3 of 3.11 or newer")
def test_the_venv_goes_on_debian_s_python3_whatever_comes_first_on_path(tmp_path: Path) -> None:
    home = make_venv(tmp_path / "install", PATH=python3_first_on_path(tmp_path))
    assert home == "/usr/bin"


def test_dispatch_python_names_the_interpreter(tmp_path: Path) -> None:
    seen = tmp_path / "called"
    wrapper = tmp_path / "my-python"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {seen}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    make_venv(tmp_path / "install", DISPATCH_PYTHON=str(wrapper))
    assert "-m venv .venv" in seen.read_text().splitlines()


def venv_note(cwd: Path, home: str, **env: str) -> str:
    """What venv_note says in `cwd`, whose .venv was made on the python3 in `home`."""
    (cwd / ".venv").mkdir(parents=True)
    (cwd / ".venv" / "pyvenv.cfg").write_text(
        f"home = {home}\ninclude-system-site-packages = false\n"
    )
    said = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; . {ROOT}/scripts/lib.sh && venv_note && echo done"],
        cwd=cwd,
        env={**{k: v for k, v in os.environ.items() if k != "DISPATCH_PYTHON"}, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert said.stdout == "done\n"  # a note never fails the script that asks for it
    return said.stderr


@pytest.mark.skipif(not debian_python_311(), reason="no Debian python3 of 3.11 or newer")
def test_a_venv_kept_on_another_python3_is_named_with_how_to_remake_it(tmp_path: Path) -> None:
    said = venv_note(tmp_path / "pyenv", "/opt/pyenv/versions/3.11.7/bin")
    assert said.startswith("note: .venv runs on /opt/pyenv/versions/3.11.7/bin/python3;")
    assert "remove .venv" in said and said.count("\n") == 1
    assert venv_note(tmp_path / "debian", "/usr/bin") == ""
    assert (
        venv_note(tmp_path / "chosen", "/opt/other/bin", DISPATCH_PYTHON="/opt/other/bin/python3")
        == ""
    )
