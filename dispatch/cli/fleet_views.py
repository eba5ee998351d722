"""How `dispatch status` and `dispatch hosts` show the fleet snapshot (dispatch/fleet/view.py):
a line in plain words first, then the tables."""

from __future__ import annotations

import json

from dispatch.cli.views import _table
from dispatch.fleet.view import HostRow, QueueRow, Snapshot, age, clock


def status_text(s: Snapshot) -> str:
    return "\n\n".join(
        [
            headline(s),
            "QUEUES\n" + _table([_queue_row(q) for q in s.queues], QUEUE_HEADER),
            "HOSTS\n" + _table([_host_row(s, h) for h in s.hosts], HOST_HEADER),
            "WAITING\n" + _table(_reason_rows(s), ("REASON", "JOBS", "OLDEST QUEUED")),
        ]
    )


def headline(s: Snapshot) -> str:
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
    if gone:
        parts.append(f"gone: {', '.join(gone)}")
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
HOST_HEADER = ("HOST", "STATE", "RUNNING", "VERSION", "UP", "LAST BEAT", "TRIGGERS")


def _queue_row(q: QueueRow) -> tuple[str, ...]:
    return (q.name, str(q.ready), str(q.delayed), str(q.active), "yes" if q.paused else "-")


def _host_row(s: Snapshot, h: HostRow) -> tuple[str, ...]:
    slots = f"{h.running}/{h.slots}" if h.slots is not None else str(h.running)
    state = "live" if h.alive else "gone"
    if h.stuck:
        state += f" ({h.stuck} stuck)"
    beat = f"{age(s.at_ms, h.last_beat_ms)} ago" if h.last_beat_ms else "-"
    if not h.alive and h.last_beat_ms:
        beat = f"{clock(h.last_beat_ms)} ({beat})"
    up = age(s.at_ms, h.started_ms) if h.alive else "-"
    return (h.name, state, slots, h.version or "-", up, beat, "mints" if h.mints else "-")


def _reason_rows(s: Snapshot) -> list[tuple[str, ...]]:
    return [
        (reason, str(w.count), f"{age(s.at_ms, w.oldest_ms)} ago" if w.oldest_ms else "-")
        for reason, w in s.reasons.items()
    ]


def hosts_text(s: Snapshot) -> str:
    return _table([_host_row(s, h) for h in s.hosts], HOST_HEADER)


def as_json(s: Snapshot, what: str = "status") -> str:
    found = s.as_json()
    if what == "hosts":
        found = {"at_ms": found["at_ms"], "hosts": found["hosts"]}
    return json.dumps(found)
