"""What the templates show, in words and numbers: the overview's parts from a frame, and the
small formatters every page uses (ages, instants, dollars, bars). No HTML is built here but
the SVG of a bar, from numbers only; every text a template prints is escaped by Jinja2."""

from __future__ import annotations

from typing import Any

from cron_descriptor import get_description
from markupsafe import Markup

from dispatch.cli.fleet_extras import dollars
from dispatch.cli.fleet_views import headline
from dispatch.fleet.view import Snapshot, age, clock
from dispatch.reasons import lookup
from dispatch.spend.plan import MICRO
from dispatch.spend.standing import Line
from dispatch.web.feed import Frame

GiB = 1024**3


def overview(frame: Frame, stale_s: float) -> dict[str, Any]:
    s, x = frame.snap, frame.extras
    return {
        "s": s,
        "x": x,
        "headline": headline(s, x) if s.at_ms else "",  # nothing was ever read
        "stale": frame.stale,
        "stale_s": stale_s,
        "running": [(h.name, job) for h in s.live for job in h.jobs],
        "reasons": [(token, w, sentence(token)) for token, w in s.reasons.items()],
        "spend": [dial(line) for line in x.spend],
    }


SNAPSHOT_WORDS = {  # what the snapshot counts that is not a reason dispatch gives
    "scheduled": "submitted to start later (--after, or a delay): it waits for its time",
    "unreadable": "its defer record cannot be read",
}


def sentence(token: str) -> str:
    entry = lookup(token)
    return entry.sentence if entry else SNAPSHOT_WORDS.get(token, "")


def dial(line: Line) -> dict[str, Any]:
    """A ledger window's numbers as shares of its cap, for a bar: used, in flight, the band."""
    cap = max(line.cap, 1)
    return {
        "line": line,
        "used": min(line.used / cap, 1.0),
        "flight": min(line.in_flight / cap, max(1.0 - line.used / cap, 0.0)),
        "soft": min(line.soft / cap, 1.0),
        "said": f"{amount(line, line.used)} used, {amount(line, line.in_flight)} in flight,"
        f" cap {amount(line, line.cap)}",
    }


def amount(line: Line, value: int) -> str:
    if line.metric == "usd":
        return dollars(value)
    return f"{value:,} {line.metric}"


def bar(share: float, extra: float = 0.0, mark: float | None = None, width: int = 160) -> Markup:
    """A horizontal bar: `share` filled, then `extra` lighter, a tick at `mark`."""
    used = round(_unit(share) * width)
    more = round(_unit(extra) * width)
    parts = [
        f'<svg class="bar" width="{width}" height="12" role="img">',
        f'<rect class="track" width="{width}" height="12"/>',
        f'<rect class="fill" width="{used}" height="12"/>',
        f'<rect class="extra" x="{used}" width="{more}" height="12"/>',
    ]
    if mark is not None and mark < 1.0:
        x = round(_unit(mark) * width)
        parts.append(f'<line class="mark" x1="{x}" x2="{x}" y1="0" y2="12"/>')
    parts.append("</svg>")
    return Markup("".join(parts))  # numbers only: nothing from Redis reaches it


def _unit(value: float) -> float:
    return min(max(value, 0.0), 1.0)


def slots(h: Any) -> Markup:
    return bar(h.running / h.slots if h.slots else 0.0)


def memory(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def promised(h: Any) -> str:
    p = h.promised
    if p is None:
        return "-"
    return f"{memory(p.memory)} of {memory(p.memory_limit)}, {p.cpus:g} of {p.cpus_limit:g} CPUs"


def schedule(row: dict[str, Any]) -> str:
    """A trigger's cron in words ("Every 5 minutes, UTC"); the expression itself where the
    describer does not know its form (`@daily`)."""
    cron, tz = str(row.get("cron") or ""), str(row.get("tz") or "UTC")
    try:
        said = get_description(cron)
    except Exception:  # the describer's own errors have no common base: any means "not known"
        said = cron
    return f"{said} ({tz})"


def usd(value: float | None) -> str:
    return "-" if value is None else dollars(round(value * MICRO))


def paused_words(s: Snapshot) -> str:
    if s.paused == "fleet":
        by = f" from {s.paused_by}" if s.paused_by else ""
        at = f" at {s.paused_at[:16].replace('T', ' ')} UTC" if s.paused_at else ""
        return f"the whole fleet is paused{by}{at}"
    if s.paused == "partial":
        return f"queues {', '.join(s.paused_queues)} are paused"
    return "not paused"


GLOBALS = {
    "age": age,
    "clock": clock,
    "bar": bar,
    "slots": slots,
    "promised": promised,
    "usd": usd,
    "schedule": schedule,
    "paused_words": paused_words,
    "sentence": sentence,
}
