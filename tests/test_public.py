"""The package's public surface: every name it lists resolves, and asking for none loads
nothing behind it (a command or `python -m dispatch.<module>` pays only for what it uses)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import dispatch


def test_every_public_name_resolves_to_its_home() -> None:
    for name in dispatch.__all__:
        value = getattr(dispatch, name)
        assert getattr(value, "__name__", name) == name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dispatch.nope  # noqa: B018


def test_importing_the_package_loads_no_client() -> None:
    probe = (
        "import sys, dispatch; print([m for m in ('redis', 'dispatch.client') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_reasons_table_runs_as_a_module_without_a_warning() -> None:
    args = [sys.executable, "-W", "error", "-m", "dispatch.reasons", "--markdown"]
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "scope-folder" in done.stdout
