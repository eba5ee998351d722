"""The doctor's line per secret profile: found and executable, private and readable."""

from __future__ import annotations

from pathlib import Path

from dispatch.cli.doctor.checks import secret_checks
from dispatch.config.schemas import SecretProfile


def test_each_profile_gets_a_line_that_never_shows_a_value(tmp_path: Path) -> None:
    values = tmp_path / "values.json"
    values.write_text('{"a": "value-one", "b": "value-two"}')
    values.chmod(0o600)
    plain = tmp_path / "plain.txt"
    plain.write_text("not a program")
    plain.chmod(0o644)
    profiles = {
        "env": SecretProfile(command=["env"]),
        "gone": SecretProfile(command=[str(tmp_path / "gone")]),
        "text": SecretProfile(command=[str(plain)]),
        "file": SecretProfile(file=str(values)),
        "open": SecretProfile(file=str(plain)),
    }
    checks = {c.detail.split(":")[0]: c for c in secret_checks(profiles)}
    assert {name: c.ok for name, c in checks.items()} == {
        "profile env": True,
        "profile file": True,
        "profile gone": False,
        "profile open": False,
        "profile text": False,
    }
    assert "private, 2 names" in checks["profile file"].detail
    assert "mode 0644" in checks["profile open"].detail
    assert all("value-" not in c.detail for c in checks.values())
