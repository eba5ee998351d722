"""The doctor's spend-cap warnings: rows no job can match and caps that cannot hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from dispatch.cli.budget import doctor_warnings
from dispatch.config.schemas import ConfigSnapshot, Endpoint, Overlay, Project, ScopedLimit


def snapshot(rows: list[dict[str, Any]], **overlay: Any) -> ConfigSnapshot:
    return ConfigSnapshot(
        limits=tuple(msgspec.convert(r, ScopedLimit) for r in rows),
        overlay=msgspec.convert(overlay, Overlay),
        projects=(Project(id="web"),),
        endpoints=(Endpoint(id="gpu", host="g", slots=1, models=["qwen3"]),),
    )


def test_rows_that_match_and_caps_that_hold_say_nothing(tmp_path: Path) -> None:
    rows = [
        {"scope": "project:web", "day": 5},
        {"scope": "model:qwen3", "dayUsd": 20},
        {"scope": str(tmp_path), "week": 3},
    ]
    assert doctor_warnings(snapshot(rows, maxCostUsd=2)) == []


def test_rows_no_job_can_match_are_named(tmp_path: Path) -> None:
    rows = [
        {"scope": "project:nope", "day": 5},
        {"scope": "model:gpt-9", "day": 5},
        {"scope": str(tmp_path / "gone" / "site"), "day": 5},
    ]
    said = doctor_warnings(snapshot(rows))
    assert len(said) == 3
    assert "project nope: projects.json has no such project" in said[0]
    assert "model gpt-9: no endpoint or setting serves that model" in said[1]
    assert "folder site: no such folder" in said[2] and str(tmp_path) not in said[2]


def test_dollar_caps_smaller_than_the_default_or_without_one_are_named() -> None:
    said = doctor_warnings(snapshot([{"scope": "*", "dayUsd": 1}], maxCostUsd=2))
    assert said == [
        "scoped-limits row the whole fleet: a dollar window ($1) is smaller than the default"
        " per-job cap (maxCostUsd $2): no job without a smaller cap of its own fits"
    ]
    [said_none] = doctor_warnings(snapshot([{"scope": "*", "weekUsd": 5}]))
    assert "no maxCostUsd" in said_none
