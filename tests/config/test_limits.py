"""The scoped-limits grammar and the spend fields: a value that cannot be a limit breaks the
file with a one-line reason, and the last good copy is kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dispatch.clock import FakeClock
from dispatch.config.limits import Scope, parse_scope
from dispatch.config.watcher import ConfigFiles

GOOD_ROWS = [
    {"scope": "*", "day": 100, "dayUsd": 50, "monthUsd": 900.5, "softHoldPct": 10},
    {"scope": "Acme/Web", "day": 10, "concurrent": 2, "dailyTokens": 2_000_000},
    {"scope": "/srv/site", "week": 0},
    {"scope": "project:web", "weekUsd": 0},
    {"scope": "model:qwen3:32b", "dayUsd": 5},
]


def write(config: Path, name: str, data: Any) -> None:
    (config / name).write_text(data if isinstance(data, str) else json.dumps(data))


@pytest.fixture
def files(tmp_path: Path) -> ConfigFiles:
    return ConfigFiles(tmp_path, FakeClock(), check_every_s=0)


@pytest.mark.parametrize(
    ("text", "scope"),
    [
        ("*", Scope("fleet", "*")),
        ("Acme/Web", Scope("repo", "acme/web")),
        ("/srv/site/", Scope("folder", "/srv/site")),
        ("project:web", Scope("project", "web")),
        ("model:qwen3:32b", Scope("model", "qwen3:32b")),
    ],
)
def test_scope_grammar(text: str, scope: Scope) -> None:
    assert parse_scope(text) == scope


@pytest.mark.parametrize("text", ["web", "team:web", "project:", "model: x", "**", "", "a/b/c"])
def test_unknown_scope_kinds_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="scope"):
        parse_scope(text)


def test_every_field_with_an_example_loads(tmp_path: Path, files: ConfigFiles) -> None:
    write(tmp_path, "scoped-limits.json", {"version": 1, "limits": GOOD_ROWS})
    settings = {"maxCostUsd": 2.5, "budgetTz": "Europe/Amsterdam", "softHoldPct": 20}
    write(tmp_path, "settings.json", {"version": 1, "settings": settings})
    snapshot = files.current()
    assert snapshot.errors == {}
    assert snapshot.limits[0].day_usd == 50 and snapshot.limits[1].daily_tokens == 2_000_000
    assert snapshot.overlay.budget_tz == "Europe/Amsterdam"
    assert snapshot.overlay.max_cost_usd == 2.5 and snapshot.overlay.soft_hold_pct == 20


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({"scope": "team:web", "day": 1}, "scope 'team:web' is not"),
        ({"scope": "acme/api", "day": -1}, "day must be 0 or more"),
        ({"scope": "acme/api", "dayUsd": -0.5}, "dayUsd must be a number 0 or more"),
        ({"scope": "acme/api", "weekUsd": 2e9}, "weekUsd must be a number 0 or more, at most"),
        ({"scope": "acme/api", "dailyTokens": -3}, "dailyTokens must be 0 or more"),
        ({"scope": "acme/api", "softHoldPct": 100}, "softHoldPct"),
        ({"scope": "acme/api", "softHoldPct": 0}, "leave it out for no band"),
        ({"scope": "acme/api", "softHoldPct": -1}, "softHoldPct"),
        ({"scope": "model:x", "concurrent": 3}, "concurrent applies to a repo or folder row only"),
        ({"scope": "project:api", "concurrent": 3}, "concurrent applies"),
        ({"scope": "acme/api", "day": 2.5}, "Expected `int"),
        ({"scope": "acme/api", "monthly": 3}, "unknown field"),
    ],
)
def test_a_bad_row_breaks_the_file_and_keeps_the_last_good_copy(
    tmp_path: Path, files: ConfigFiles, row: dict[str, Any], says: str
) -> None:
    write(tmp_path, "scoped-limits.json", {"version": 1, "limits": GOOD_ROWS})
    assert len(files.current().limits) == len(GOOD_ROWS)
    write(tmp_path, "scoped-limits.json", {"version": 1, "limits": [*GOOD_ROWS, row]})
    snapshot = files.current()
    reason = snapshot.errors["scoped-limits.json"]
    assert says in reason and "\n" not in reason
    assert len(snapshot.limits) == len(GOOD_ROWS)


def test_a_scope_twice_breaks_the_file(tmp_path: Path, files: ConfigFiles) -> None:
    rows = [{"scope": "acme/web", "day": 1}, {"scope": "ACME/web", "dayUsd": 1}]
    write(tmp_path, "scoped-limits.json", {"version": 1, "limits": rows})
    assert "appears twice" in files.current().errors["scoped-limits.json"]


def test_nan_is_not_json_and_breaks_the_file(tmp_path: Path, files: ConfigFiles) -> None:
    write(
        tmp_path, "scoped-limits.json", '{"version": 1, "limits": [{"scope": "*", "dayUsd": NaN}]}'
    )
    assert "scoped-limits.json" in files.current().errors


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"maxCostUsd": 0}, "maxCostUsd must be a number above 0"),
        ({"maxCostUsd": -1}, "maxCostUsd"),
        ({"budgetTz": "Mars/Olympus"}, "budgetTz 'Mars/Olympus' is not a known time zone"),
        ({"softHoldPct": 150}, "softHoldPct"),
    ],
)
def test_bad_spend_settings_break_settings_json(
    tmp_path: Path, files: ConfigFiles, settings: dict[str, Any], says: str
) -> None:
    write(tmp_path, "settings.json", {"version": 1, "settings": settings})
    snapshot = files.current()
    assert says in snapshot.errors["settings.json"]
    assert snapshot.overlay_error is not None  # jobs are refused, not run on it
