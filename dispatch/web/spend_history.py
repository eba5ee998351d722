"""The Spend page's numbers: each spend ledger's windows over the last 30 days, from the
counters its caps reserve in.

Per row of scoped-limits.json, metric and window, every window of that kind that overlaps the
last 30 days, from the very counters the caps use (`used`, and `held`: reserved by runs not
settled yet), all in one round trip. Counters are kept 31 days past their window
(spend/plan.py `HISTORY_MS`); a period without one spent nothing, or is older than that.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

from markupsafe import Markup

from dispatch.cli.fleet_extras import dollars
from dispatch.client import Client
from dispatch.config.limits import parse_scope, zone
from dispatch.config.schemas import ConfigSnapshot
from dispatch.queue.keys import BudgetKeys, budget_keys
from dispatch.spend.plan import Metric, caps_of, ledger_of, soft_of
from dispatch.spend.windows import Window, WindowKind, window
from dispatch.web import charts

HISTORY_DAYS = 30
DAY_MS = 86_400_000


@dataclass(frozen=True)
class Period:
    window: Window
    used: int | None  # None: no counter
    held: int  # in flight: reserved by runs not settled yet


@dataclass(frozen=True)
class Chart:
    """One ledger's metric per window over the last 30 days."""

    ledger: str  # as `dispatch budget` names it
    metric: Metric
    kind: WindowKind
    cap: int
    soft: int  # == cap: no soft band
    periods: list[Period]  # oldest first; the last is the current one
    svg: Markup

    @property
    def title(self) -> str:
        return f"{self.ledger}: {self.metric} per {self.kind}"

    @property
    def said(self) -> str:
        now, band = self.periods[-1], ""
        if self.soft < self.cap:
            band = f", urgent jobs only from {amount(self.metric, self.soft)}"
        return (
            f"This {self.kind} ({now.window.period}): {amount(self.metric, now.used or 0)} used,"
            f" {amount(self.metric, now.held)} in flight, cap {amount(self.metric, self.cap)}"
            f"{band}."
        )

    @property
    def missing(self) -> list[str]:
        """The periods no counter was found for."""
        return [p.window.period for p in self.periods if p.used is None]


@dataclass(frozen=True)
class _Plan:
    ledger: str
    metric: Metric
    kind: WindowKind
    cap: int
    soft: int
    windows: list[Window]
    keys: list[str]


async def spend(client: Client, config: ConfigSnapshot) -> list[Chart]:
    """A chart per ledger, metric and window of this machine's scoped-limits.json; the current
    period is read with the past ones, in one round trip, so every bar is of one instant."""
    plans = _plans(config, client.clock.now_ms(), budget_keys(client.prefix))
    if not plans:
        return []
    async with client.redis.pipeline(transaction=False) as pipe:
        for key in (k for plan in plans for k in plan.keys):
            pipe.hmget(key, "used", "held")
        replies = iter(await pipe.execute())
    return [_chart(plan, [_period(w, next(replies)) for w in plan.windows]) for plan in plans]


def _plans(config: ConfigSnapshot, now_ms: int, keys: BudgetKeys) -> list[_Plan]:
    """Each row's caps, as `dispatch budget` reads them (spend/standing.py), with the keys of
    every window over the last 30 days."""
    tz = zone(config.overlay.budget_tz)
    found: list[_Plan] = []
    for row in config.limits:
        ledger = ledger_of(parse_scope(row.scope))
        pct = row.soft_hold_pct if row.soft_hold_pct is not None else config.overlay.soft_hold_pct
        for metric, kind, cap in caps_of(row):
            windows = periods(kind, now_ms, tz)
            names = [keys.counter(f"{metric}:{ledger.key_id}:{w.period}") for w in windows]
            found.append(_Plan(ledger.label, metric, kind, cap, soft_of(cap, pct), windows, names))
    return found


def periods(kind: WindowKind, now_ms: int, tz: ZoneInfo, days: int = HISTORY_DAYS) -> list[Window]:
    """Every window of `kind` that overlaps the last `days` days, oldest first."""
    since_ms = now_ms - days * DAY_MS
    found = [window(kind, now_ms, tz)]
    while found[-1].start_ms > since_ms:
        found.append(window(kind, found[-1].start_ms - 1, tz))
    return found[::-1]


def _period(w: Window, reply: list[Any]) -> Period:
    used, held = reply
    if used is None and held is None:
        return Period(w, None, 0)
    return Period(w, int(used or 0), int(held or 0))


def _chart(plan: _Plan, found: list[Period]) -> Chart:
    svg = charts.bars(
        [p.used for p in found],
        [_period_label(p.window) for p in found],
        cap=plan.cap,
        soft=plan.soft if plan.soft < plan.cap else None,
        extra=[p.held for p in found],
        titles=[_period_title(plan.metric, p) for p in found],
        fmt=partial(amount, plan.metric),
        name=f"{plan.ledger}: {plan.metric} per {plan.kind}",
    )
    return Chart(plan.ledger, plan.metric, plan.kind, plan.cap, plan.soft, found, svg)


def _period_label(w: Window) -> str:
    """Short enough to sit under a bar: `01-31`, `W05`, `2025-01`."""
    return w.period if w.kind == "month" else w.period[5:]


def _period_title(metric: Metric, p: Period) -> str:
    if p.used is None:
        return f"{p.window.period}: no counter"
    return f"{p.window.period}: {amount(metric, p.used)} used, {amount(metric, p.held)} in flight"


def amount(metric: Metric, value: float) -> str:
    """Dollars as dollars (counters hold micro-dollars), runs and tokens as counts."""
    n = round(value)
    if metric == "usd":
        return dollars(n)
    return f"{n:,} {metric if n != 1 else metric.removesuffix('s')}"
