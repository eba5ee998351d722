"""How `dispatch status` and `dispatch hosts` show the fleet snapshot (dispatch/fleet/view.py):
a line in plain words first, then the tables."""

from __future__ import annotations

import json

from dispatch.cli.fleet_extras import Extras, dollars
from dispatch.cli.views import _table
from dispatch.fleet.view import HostRow, QueueRow, Snapshot, age, clock


def status_text(s: Snapshot, x: Extras | None = None) -> str:
    x = x or Extras()
    parts = [
        headline(s, x),
        "QUEUES\n" + _table([_queue_row(q) for q in s.queues], QUEUE_HEADER),
        "HOSTS\n" + _table([_host_row(s, h) for h in s.hosts], HOST_HEADER),
        "RUNNING\n" + _table(_running_rows(s), ("HOST", "JOB", "QUEUE", "TARGET", "FOR")),
        "WAITING\n" + _table(_reason_rows(s), ("REASON", "JOBS", "OLDEST QUEUED")),
        "ENDED\n" + _table(_ending_rows(s), ("JOB", "ATTEMPT", "OUTCOME", "REASON", "HOST", "AGO")),
    ]
    if x.spend:
        parts.append("SPEND\n" + _table(_spend_rows(x), SPEND_HEADER))
    if x.triggers:
        parts.append("TRIGGERS\n" + _table(_trigger_rows(x), ("TRIGGER", "STATE", "NEXT", "LAST")))
    parts.extend(f"{name} is broken: its last good copy is read" for name in x.broken)
    if x.missing:
        parts.append(x.missing)
    return "\n\n".join(parts)


def headline(s: Snapshot, x: Extras | None = None) -> str:
    x = x or Extras()
    live = s.live
    running = sum(h.running for h in live)
    slots = sum(h.slots or 0 for h in live)
    ready = sum(q.ready for q in s.queues)
    delayed = sum(q.delayed for q in s.queues)
    gone = [h.name for h in s.hosts if not h.alive]
    parts = [
        f"running: {running} of {slots} slots on {len(live)} host{'s' if len(live) != 1 else ''}",
        f"{ready} ready",
        f"{delayed} waiting{_by_reason(s, delayed)}",
        f"paused: {_paused(s)}",
    ]
    if (today := x.today()) is not None:
        ledger = "" if today.ledger == "the whole fleet" else f" ({today.ledger})"
        parts.append(f"spend today {dollars(today.used)} of {dollars(today.cap)}{ledger}")
    if gone:
        parts.append(f"gone: {', '.join(gone)}")
    if draining := [h.name for h in live if h.draining]:
        parts.append(f"draining: {', '.join(draining)}")
    if x.overdue:
        parts.append(f"overdue: trigger {', '.join(x.overdue)}")
    if failed := sum(s.failures.values()):
        shown = ", ".join(f"{n} {reason}" for reason, n in list(s.failures.items())[:3])
        parts.append(f"{failed} failed in the last hour ({shown})")
    stuck = sum(h.stuck for h in live)
    if stuck:
        parts.append(f"{stuck} run(s) whose stop did not take (dispatch doctor)")
    return "; ".join(parts)


def _by_reason(s: Snapshot, delayed: int) -> str:
    if not s.reasons:
        return ""
    shown = ", ".join(f"{w.count} {reason}" for reason, w in list(s.reasons.items())[:4])
    more = ", ..." if len(s.reasons) > 4 else ""
    of = f"; of the first {s.sampled}" if s.sampled < delayed else ""
    return f" ({shown}{more}{of})"


def _paused(s: Snapshot) -> str:
    if s.paused == "fleet":
        return "yes, the whole fleet (dispatch resume)"
    if s.paused == "partial":
        return f"queues {', '.join(s.paused_queues)} only"
    return "no"


QUEUE_HEADER = ("QUEUE", "READY", "WAITING", "ACTIVE", "PAUSED")
HOST_HEADER = (
    "HOST", "STATE", "RUNNING", "PROMISED", "VERSION", "UP", "LAST BEAT", "TRIGGERS"
)  # fmt: skip


def _queue_row(q: QueueRow) -> tuple[str, ...]:
    return (q.name, str(q.ready), str(q.delayed), str(q.active), "yes" if q.paused else "-")


def _host_row(s: Snapshot, h: HostRow) -> tuple[str, ...]:
    slots = f"{h.running}/{h.slots}" if h.slots is not None else str(h.running)
    state = ("draining" if h.draining else "live") if h.alive else "gone"
    if h.stuck:
        state += f" ({h.stuck} stuck)"
    beat = f"{age(s.at_ms, h.last_beat_ms)} ago" if h.last_beat_ms else "-"
    if not h.alive and h.last_beat_ms:
        beat = f"{clock(h.last_beat_ms)} ({beat})"
    up = age(s.at_ms, h.started_ms) if h.alive else "-"
    mints = "mints" if h.mints else "-"
    return (h.name, state, slots, _budget(h), h.version or "-", up, beat, mints)


def _reason_rows(s: Snapshot) -> list[tuple[str, ...]]:
    return [
        (reason, str(w.count), f"{age(s.at_ms, w.oldest_ms)} ago" if w.oldest_ms else "-")
        for reason, w in s.reasons.items()
    ]


def _running_rows(s: Snapshot) -> list[tuple[str, ...]]:
    return [
        (h.name, j.id, j.queue, j.target or "-", age(s.at_ms, j.started_ms))
        for h in s.live
        for j in h.jobs
    ]


def _ending_rows(s: Snapshot) -> list[tuple[str, ...]]:
    return [
        (e.id, str(e.attempt), e.outcome, e.reason or "-", e.host, age(s.at_ms, e.ended_ms))
        for e in s.recent
    ]


SPEND_HEADER = ("LEDGER", "WINDOW", "METRIC", "USED", "IN FLIGHT", "CAP")


def _spend_rows(x: Extras) -> list[tuple[str, ...]]:
    def amount(metric: str, value: int) -> str:
        return dollars(value) if metric == "usd" else f"{value:,}"

    return [
        (line.ledger, line.window, line.metric, amount(line.metric, line.used),
         amount(line.metric, line.in_flight), amount(line.metric, line.cap))
        for line in x.spend
    ]  # fmt: skip


def _trigger_rows(x: Extras) -> list[tuple[str, ...]]:
    return [
        (t["id"], t["state"] + (" (overdue)" if t.get("overdue") else ""), t["next"] or "-",
         t["last"] or "-")
        for t in x.triggers
    ]  # fmt: skip


def _budget(h: HostRow) -> str:
    b = h.promised
    if b is None or not h.alive:
        return "-"
    return (
        f"{b.memory / 2**30:.1f}/{b.memory_limit / 2**30:.1f} GiB, {b.cpus:g}/{b.cpus_limit:g} CPU"
    )


def hosts_text(s: Snapshot) -> str:
    rows = _table([_host_row(s, h) for h in s.hosts], HOST_HEADER)
    running = _running_rows(s)
    if not running:
        return rows
    return rows + "\n\n" + _table(running, ("HOST", "JOB", "QUEUE", "TARGET", "FOR"))


def as_json(s: Snapshot, what: str = "status", x: Extras | None = None) -> str:
    found = s.as_json()
    if what == "hosts":
        found = {"at_ms": found["at_ms"], "hosts": found["hosts"]}
    elif x is not None:
        found |= x.as_json()
    return json.dumps(found)
