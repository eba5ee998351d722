"""The spend caps at the command line: `submit --max-cost-usd/--urgent`, `dispatch budget`, and
the doctor's warnings about caps that cannot do what they seem to."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from dispatch.config.settings import Settings
from dispatch.errors import InvalidJob
from dispatch.model import cost_problems

if TYPE_CHECKING:  # the rest is loaded by the budget report alone, not by `submit`
    from dispatch.config.schemas import ConfigSnapshot, ScopedLimit
    from dispatch.spend.standing import Line

Adder = Callable[..., argparse.ArgumentParser]


def add_submit_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-cost-usd",
        type=float,
        help="this job's dollar cap, reserved at start: 0.000001 (a micro-dollar) to 1000000",
    )
    p.add_argument("--urgent", action="store_true", help="may start inside a cap's soft-hold band")


def submit_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The job document's spend fields (camelCase, as documents spell them)."""
    fields: dict[str, Any] = {}
    if args.max_cost_usd is not None:
        # checked here too: JSON has no nan or inf, so the encoder would write them as null
        problems = cost_problems(args.max_cost_usd)
        if problems:
            raise InvalidJob(problems[0])
        fields["maxCostUsd"] = args.max_cost_usd
    if args.urgent:
        fields["urgent"] = True
    return fields


def add_budget_command(add: Adder, func: Callable[..., int]) -> None:
    p = add("budget", func, "spend caps: used, in flight, cap and soft band per ledger and window")
    p.add_argument("--json", action="store_true")


def report(settings: Settings, as_json: bool, now_ms: int) -> str:
    import asyncio

    from dispatch.client import Client
    from dispatch.config.watcher import load_once
    from dispatch.spend.standing import lines

    snapshot = load_once(settings.config_dir)

    async def go() -> list[Line]:
        async with Client.from_settings(settings) as client:
            return await lines(
                client.redis, settings.prefix, snapshot.limits, snapshot.overlay, now_ms
            )

    found = asyncio.run(go())
    if as_json:
        return msgspec.json.encode([line.as_json() for line in found]).decode()
    return table(found, snapshot)


def _amount(metric: str, value: int) -> str:
    from dispatch.spend.plan import MICRO

    return f"${value / MICRO:,.2f}" if metric == "usd" else f"{value:,}"


def table(found: list[Line], snapshot: ConfigSnapshot) -> str:
    from dispatch.cli.views import _table

    rows = [
        (
            line.ledger,
            f"{line.window} {line.period}",
            line.metric,
            _amount(line.metric, line.used),
            _amount(line.metric, line.in_flight),
            _amount(line.metric, line.cap),
            "-" if line.soft == line.cap else "from " + _amount(line.metric, line.soft),
            line.turns,
        )
        for line in found
    ]
    header = ("LEDGER", "WINDOW", "METRIC", "USED", "IN FLIGHT", "CAP", "SOFT", "TURNS")
    said = _table(rows, header)
    for name in ("scoped-limits.json", "settings.json"):
        if name in snapshot.errors:
            said += f"\n{name} is broken ({snapshot.errors[name]}): its last good copy is shown"
    return said


def doctor_warnings(snapshot: ConfigSnapshot) -> list[str]:
    """Caps that cannot do what they seem to; each a line for `dispatch doctor`."""
    warnings = [w for row in snapshot.limits for w in _row_warnings(row, snapshot)]
    has_dollars = any(_dollar_caps(row) for row in snapshot.limits)
    if has_dollars and snapshot.overlay.max_cost_usd is None:
        warnings.append(
            "dollar caps are set but settings.json has no maxCostUsd: a job without"
            " --max-cost-usd reserves nothing, so the caps hold only as runs report their cost"
        )
    return warnings


def _dollar_caps(row: ScopedLimit) -> list[float]:
    return [v for v in (row.day_usd, row.week_usd, row.month_usd) if v is not None]


def _row_warnings(row: ScopedLimit, snapshot: ConfigSnapshot) -> list[str]:
    from dispatch.config.limits import parse_scope
    from dispatch.spend.plan import ledger_of

    scope = parse_scope(row.scope)
    label = ledger_of(scope).label
    found = []
    if scope.kind == "project" and scope.value not in {p.id for p in snapshot.projects}:
        found.append("projects.json has no such project; only jobs that name it match")
    served = {m for e in snapshot.endpoints for m in e.models} | {snapshot.overlay.model}
    if scope.kind == "model" and scope.value not in served:
        found.append("no endpoint or setting serves that model; only jobs that name it match")
    if scope.kind == "folder" and not Path(scope.value).is_dir():
        found.append("no such folder on this host; no local job here can match it")
    default = snapshot.overlay.max_cost_usd
    smallest = min(_dollar_caps(row), default=None)
    if default is not None and smallest is not None and smallest < default:
        found.append(
            f"a dollar window (${smallest:g}) is smaller than the default per-job cap"
            f" (maxCostUsd ${default:g}): no job without a smaller cap of its own fits"
        )
    return [f"scoped-limits row {label}: {w}" for w in found]
