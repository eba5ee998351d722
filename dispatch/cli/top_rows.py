"""What `dispatch top` shows of a fleet snapshot (dispatch/fleet/view.py): each table's rows,
keyed, and the line that says the board is stale. Plain text, no Textual: dispatch/cli/top.py
puts it on the screen."""

from __future__ import annotations

from dispatch.fleet.view import HostRow, RunningJob, Snapshot, age, clock

Row = tuple[str, tuple[str, ...]]  # a key (host, reason or job id) and the cells shown
STALE_AFTER_S = 2.5  # a board this old is dimmed even before its read fails: two reads missed
BAR_WIDTH = 12

HEADERS = {
    "hosts": ("HOST", "STATE", "SLOTS", "UP", "LAST BEAT"),
    "waiting": ("REASON", "JOBS", "OLDEST QUEUED"),
    "running": ("JOB", "QUEUE", "TARGET", "HOST", "RUNNING FOR"),
    "endings": ("JOB", "QUEUE", "OUTCOME", "REASON", "HOST", "ENDED"),
}
JOB_TABLES = ("running", "endings")  # the tables whose rows are jobs a key can act on


def rows(s: Snapshot) -> dict[str, list[Row]]:
    return {
        "hosts": [(h.name, _host(s, h)) for h in s.hosts],
        "waiting": [
            (reason, (reason, str(w.count), _ago(s, w.oldest_ms)))
            for reason, w in s.reasons.items()
        ],
        "running": [
            (j.id, (j.id, j.queue, j.target or "-", h.name, age(s.at_ms, _on_server(h, j))))
            for h in s.live
            for j in h.jobs
        ],
        "endings": [
            (e.id, (e.id, e.queue, e.outcome, e.reason or "-", e.host or "-", _ago(s, e.ended_ms)))
            for e in s.recent
        ],
    }


def _host(s: Snapshot, h: HostRow) -> tuple[str, ...]:
    state = ("live" if h.alive else "gone") + (f" ({h.stuck} stuck)" if h.stuck else "")
    up = age(s.at_ms, h.started_ms) if h.alive else "-"
    beat = _ago(s, h.last_beat_ms)
    if not h.alive and h.last_beat_ms:
        beat = f"{clock(h.last_beat_ms)} ({beat})"
    return (h.name, state, slot_bar(h.running, h.slots), up, beat)


def _on_server(h: HostRow, j: RunningJob) -> int | None:
    """The job's start on the server's clock: its host claimed it by its own."""
    return j.started_ms + (h.offset_ms or 0) if j.started_ms is not None else None


def slot_bar(running: int, slots: int | None) -> str:
    """`█████░░░░░░░ 5/12`: the host's running jobs against its slots."""
    if not slots:
        return f"{running} running"
    filled = round(BAR_WIDTH * min(running, slots) / slots)
    return f"{'█' * filled}{'░' * (BAR_WIDTH - filled)} {running}/{slots}"


def _ago(s: Snapshot, ms: int | None) -> str:
    return f"{age(s.at_ms, ms)} ago" if ms else "-"


def stale_line(good_s: float | None, now_s: float, error: str) -> str:
    """Nothing while the board is fresh; else how long since the last good snapshot, and why."""
    if good_s is None:
        return f"no snapshot yet: {error}" if error else ""
    old_s = now_s - good_s
    if not error and old_s < STALE_AFTER_S:
        return ""
    return f"stale {int(old_s)} s: {error or 'the fleet is slow to read'}"
