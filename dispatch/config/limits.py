"""What a scoped-limits row may say, and the spend fields of settings.json.

Scope grammar (one row, one scope):

    *                 the whole fleet
    owner/name        a repo (case-insensitive)
    /abs/folder       a local folder and everything under it
    project:<id>      a project (projects.json, or named by the job)
    model:<name>      a model (the job's, else settings.json's)

Anything else is an unknown scope kind, and the file is broken: a limit nobody can match is a
limit the operator believes in and does not have. For the same reason `concurrent` is only
accepted where the scope gate reads it (a repo or a folder), a number must be finite and not
negative, and a scope may appear only once. A cap of 0 is valid: nothing may run in it.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from functools import cache
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dispatch.config.schemas import Overlay, ScopedLimit

ScopeKind = Literal["fleet", "repo", "folder", "project", "model"]
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_NAMED = re.compile(r"(project|model):(\S+)")
MAX_USD = 1e9  # far above any budget, far below where micro-dollars stop being exact in Lua
MAX_COUNT = 10**12


@dataclass(frozen=True, slots=True)
class Scope:
    kind: ScopeKind
    value: str  # "*", the repo lowercased, the folder normalised, the id or the model name


def parse_scope(text: str) -> Scope:
    """The scope a row names; ValueError for an unknown kind."""
    if text == "*":
        return Scope("fleet", "*")
    if _REPO.fullmatch(text):
        return Scope("repo", text.lower())
    if os.path.isabs(text) and "\0" not in text:
        return Scope("folder", os.path.normpath(text))
    named = _NAMED.fullmatch(text)
    if named:
        kind: ScopeKind = "project" if named.group(1) == "project" else "model"
        return Scope(kind, named.group(2))
    raise ValueError(
        f"scope {text!r} is not *, owner/name, an absolute folder, project:<id> or model:<name>"
    )


@cache
def zone(name: str) -> ZoneInfo:
    """The time zone `name`; ValueError when this machine does not know it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"budgetTz {name!r} is not a known time zone") from exc


def limit_problems(rows: list[ScopedLimit]) -> list[str]:
    problems: list[str] = []
    seen: set[Scope] = set()
    for i, row in enumerate(rows):
        at = f"limits[{i}]"
        try:
            scope = parse_scope(row.scope)
        except ValueError as exc:
            problems.append(f"{at}: {exc}")
            continue
        if scope in seen:
            problems.append(f"{at}: scope {row.scope!r} appears twice")
        seen.add(scope)
        if row.concurrent is not None and scope.kind not in ("repo", "folder"):
            problems.append(f"{at}: concurrent applies to a repo or folder row only")
        problems += [f"{at}: {p}" for p in _number_problems(row)]
    return problems


def _number_problems(row: ScopedLimit) -> list[str]:
    counts = {"concurrent": row.concurrent, "day": row.day, "week": row.week}
    counts |= {"month": row.month, "dailyTokens": row.daily_tokens}
    dollars = {"dayUsd": row.day_usd, "weekUsd": row.week_usd, "monthUsd": row.month_usd}
    problems = [f"{k} must be 0 or more" for k, v in counts.items() if v is not None and v < 0]
    problems += [
        f"{k} must be at most {MAX_COUNT}" for k, v in counts.items() if (v or 0) > MAX_COUNT
    ]
    problems += [p for k, v in dollars.items() if (p := _usd_problem(k, v, zero_ok=True))]
    return problems + _pct_problem(row.soft_hold_pct)


def _usd_problem(name: str, value: float | None, *, zero_ok: bool) -> str:
    if value is None:
        return ""
    floor_ok = value >= 0 if zero_ok else value > 0
    if not math.isfinite(value) or not floor_ok or value > MAX_USD:
        above = "0 or more" if zero_ok else "above 0"
        return f"{name} must be a number {above}, at most {MAX_USD:.0f}"
    return ""


def _pct_problem(pct: float | None) -> list[str]:
    if pct is None or (math.isfinite(pct) and 0 < pct < 100):
        return []
    if pct == 0:  # no band in the old reading; here it would hold every job that is not urgent
        return [
            "softHoldPct is where the band starts, in percent of the cap: 0 holds every job; "
            "leave it out for no band"
        ]
    return [
        "softHoldPct must be above 0 and below 100 (where the band starts, in percent of the cap)"
    ]


def overlay_problems(overlay: Overlay) -> list[str]:
    """settings.json's spend fields."""
    problems = [p for p in [_usd_problem("maxCostUsd", overlay.max_cost_usd, zero_ok=False)] if p]
    problems += _pct_problem(overlay.soft_hold_pct)
    problems += _concurrency_problems(overlay.concurrency)
    try:
        zone(overlay.budget_tz)
    except ValueError as exc:
        problems.append(str(exc))
    return [f"settings: {p}" for p in problems]


MAX_SLOTS = 10_000  # as DISPATCH_CONCURRENCY
_HOST_OR_ALL = re.compile(r"\*|[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def _concurrency_problems(rows: dict[str, int]) -> list[str]:
    problems = []
    for host, slots in rows.items():
        if not _HOST_OR_ALL.fullmatch(host):
            problems.append(f'concurrency: {host[:64]!r} is neither a host name nor "*"')
        if isinstance(slots, bool) or not 1 <= slots <= MAX_SLOTS:
            problems.append(f"concurrency[{host[:64]!r}]: a whole number from 1 to {MAX_SLOTS}")
    return problems
