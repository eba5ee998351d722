"""Which counters a job touches: every scoped-limits row that matches it, every window and
metric that row caps.

A row matches a job when its scope is `*`, the job's repo, a folder the job's folder lies in
(resolved paths, whole components), the job's project (as the project gate resolved it) or its
model (the job's, else settings.json's). Each cap of a matching row is one counter: runs per
day / week / month (the job takes 1), micro-dollars per day / week / month (the job takes its
dollar cap: the job's `maxCostUsd`, else settings.json's, else 0), and tokens per day (the job
takes nothing now: the cap is checked before, the tokens recorded after the run).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal
from zoneinfo import ZoneInfo

from dispatch.config.limits import Scope, parse_scope
from dispatch.config.schemas import Overlay, ScopedLimit
from dispatch.model import Job
from dispatch.queue.keys import BudgetKeys
from dispatch.spend.windows import Window, WindowKind, window

Metric = Literal["runs", "usd", "tokens"]
MICRO = 1_000_000
# A counter outlives its window by more than the longest run (7 days), so a run that ends
# after midnight still settles against the window it reserved in.
MARGIN_MS = 8 * 86_400_000
# A counter is kept a month past its window too: the web page's 30-day Spend chart reads the
# very counters the caps saw (dispatch/web/spend_history.py), not a copy of them.
HISTORY_MS = 31 * 86_400_000


def micro(usd: float) -> int:
    return round(usd * MICRO)


@dataclass(frozen=True, slots=True)
class Ledger:
    """One row's ledger: its scope, how sentences name it, and how its keys do."""

    scope: Scope
    label: str
    key_id: str


@dataclass(frozen=True, slots=True)
class Counter:
    metric: Metric
    ledger: Ledger
    window: Window
    key: str
    amount: int
    cap: int
    soft: int  # the soft-hold band starts here (== cap: no band)

    @property
    def expire_at_ms(self) -> int:
        # whichever need is longer: settling late runs, or the Spend page's 30 days
        return self.window.end_ms + max(MARGIN_MS, HISTORY_MS)


def ledger_of(scope: Scope) -> Ledger:
    """Labels name a folder by its base name only; keys by a hash, never a host path."""
    value = scope.value
    if scope.kind == "fleet":
        return Ledger(scope, "the whole fleet", "*")
    if scope.kind == "folder":
        digest = hashlib.sha256(value.encode()).hexdigest()[:16]
        return Ledger(scope, f"folder {os.path.basename(value) or '/'}", f"folder:{digest}")
    if scope.kind == "repo":
        return Ledger(scope, value, f"repo:{value}")
    return Ledger(scope, f"{scope.kind} {value}", f"{scope.kind}:{value}")


def caps_of(row: ScopedLimit) -> list[tuple[Metric, WindowKind, int]]:
    """The caps a row sets, dollars in micro-dollars."""
    found: list[tuple[Metric, WindowKind, int | None]] = [
        ("runs", "day", row.day),
        ("runs", "week", row.week),
        ("runs", "month", row.month),
        ("usd", "day", None if row.day_usd is None else micro(row.day_usd)),
        ("usd", "week", None if row.week_usd is None else micro(row.week_usd)),
        ("usd", "month", None if row.month_usd is None else micro(row.month_usd)),
        ("tokens", "day", row.daily_tokens),
    ]
    return [(metric, kind, cap) for metric, kind, cap in found if cap is not None]


@dataclass(frozen=True, slots=True)
class Subject:
    """What rows are matched against: the job as the earlier gates resolved it."""

    repo: str | None  # lowercased
    folder: str | None  # resolved
    project: str | None
    model: str | None


def subject_of(job: Job, folder: str | None, project: str | None, model: str | None) -> Subject:
    """`folder` is the job's as the folder gate resolved it (gates/folder.py)."""
    repo = job.repo.lower() if job.kind == "forge" and job.repo else None
    return Subject(repo, folder, project, model)


def matches(scope: Scope, subject: Subject) -> bool:
    if scope.kind == "fleet":
        return True
    if scope.kind == "repo":
        return scope.value == subject.repo
    if scope.kind == "project":
        return scope.value == subject.project
    if scope.kind == "model":
        return scope.value == subject.model
    if subject.folder is None:
        return False
    root = os.path.realpath(scope.value)
    return subject.folder == root or subject.folder.startswith(root.rstrip("/") + "/")


def soft_of(cap: int, pct: float | None) -> int:
    """Where the soft-hold band starts: at `pct` percent of `cap`, rounded down (the
    reference's `softHoldPct`: cap 10 at 80 runs 8 and holds the 9th and 10th); no band
    without a percent."""
    return cap if pct is None else math.floor(cap * pct / 100)


def counters(
    rows: Iterable[ScopedLimit],
    subject: Subject,
    job_usd: float | None,
    overlay: Overlay,
    now_ms: int,
    tz: ZoneInfo,
    keys: BudgetKeys,
) -> list[Counter]:
    """Every counter of every matching row. A row that does not parse is skipped: the watcher
    never hands one over (the file would be broken, its last good copy kept)."""
    usd = micro(job_usd if job_usd is not None else overlay.max_cost_usd or 0)
    amounts: dict[Metric, int] = {"runs": 1, "usd": usd, "tokens": 0}
    found: list[Counter] = []
    for row in rows:
        try:
            scope = parse_scope(row.scope)
        except ValueError:
            continue
        if not matches(scope, subject):
            continue
        ledger = ledger_of(scope)
        pct = row.soft_hold_pct if row.soft_hold_pct is not None else overlay.soft_hold_pct
        for metric, kind, cap in caps_of(row):
            w = window(kind, now_ms, tz)
            key = keys.counter(f"{metric}:{ledger.key_id}:{w.period}")
            found.append(Counter(metric, ledger, w, key, amounts[metric], cap, soft_of(cap, pct)))
    return found
