"""The shipped alert rules load in Prometheus's own checker and fire on the series they are
written for (`promtool`, from Debian's `prometheus` package; scripts/test.sh installs it). In
CI a missing promtool fails these tests rather than skipping them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

RULES = Path(__file__).parents[2] / "deploy" / "prometheus"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing: scripts/test.sh installs Debian's prometheus")
        pytest.skip("promtool is missing: apt-get install prometheus")
    return found


@pytest.mark.parametrize(
    "check", [["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]]
)
def test_promtool_accepts_the_rules(check: list[str]) -> None:
    done = subprocess.run(
        [promtool(), *check], cwd=RULES, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
