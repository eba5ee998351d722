"""`dispatch capacity [--since 24h] [--json]`: how full the fleet has been, from run records.

Per host: its share of slot time used (run time over slots x window), jobs at once on average
and at the peak, the time every slot was taken, the most memory and CPU promised against its
budget when a run was admitted (the record's `at_start`), and the wait for a slot (queued to
started), p50 and p95. Per project: runs, run time in all, p50 and p95, and the most memory a
run was given. Runs are clipped to the window; a run with no start (refused, cancelled before
it began) counts for nothing but its project's tally of runs. Records older than this release
have no `at_start`: a host's slots are then unknown, and its busy share and full time with them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from dispatch.cli.views import _table
from dispatch.model import RunRecord, instant_ms

GIB = 2**30


@dataclass
class HostLoad:
    host: str
    runs: int = 0
    slots: int | None = None
    busy: float | None = None  # share of slot time used
    average: float = 0.0  # jobs at once
    peak: int = 0
    full_s: float | None = None  # seconds with every slot taken
    memory: int = 0  # the most promised at an admission, bytes
    memory_limit: int = 0
    cpus: float = 0.0
    cpus_limit: float = 0.0
    wait_p50_s: float | None = None
    wait_p95_s: float | None = None


@dataclass
class ProjectLoad:
    project: str
    runs: int = 0
    run_s: float = 0.0
    run_p50_s: float | None = None
    run_p95_s: float | None = None
    memory: int | None = None  # the most a run was given


Span = tuple[int, int]  # start, end ms


def measure(
    records: Iterable[RunRecord], since_ms: int, now_ms: int
) -> tuple[list[HostLoad], list[ProjectLoad]]:
    hosts: dict[str, HostLoad] = {}
    spans: dict[str, list[Span]] = defaultdict(list)
    waits: dict[str, list[float]] = defaultdict(list)
    projects: dict[str, ProjectLoad] = {}
    lengths: dict[str, list[float]] = defaultdict(list)
    for r in records:
        project = projects.setdefault(r.project or "-", ProjectLoad(r.project or "-"))
        project.runs += 1
        if r.memory is not None:
            project.memory = max(project.memory or 0, r.memory)
        start, end, queued = _ms(r.started_at), _ms(r.ended_at), _ms(r.queued_at)
        if start is None:
            continue
        host = hosts.setdefault(r.host, HostLoad(r.host))
        host.runs += 1
        _note_start(host, r)
        if queued is not None and start >= queued:
            waits[r.host].append((start - queued) / 1000)
        if end is not None and end >= start:
            lengths[project.project].append((end - start) / 1000)
            # a run within one millisecond still ran: the sweep needs its start before its end
            clipped = (max(start, since_ms), min(max(end, start + 1), now_ms))
            if clipped[1] > clipped[0]:
                spans[r.host].append(clipped)
    window_s = max(now_ms - since_ms, 1) / 1000
    for name, host in hosts.items():
        _fill(host, spans[name], window_s)
        host.wait_p50_s, host.wait_p95_s = percentile(waits[name], 50), percentile(waits[name], 95)
    for name, project in projects.items():
        runs = lengths[name]
        project.run_s = sum(runs)
        project.run_p50_s, project.run_p95_s = percentile(runs, 50), percentile(runs, 95)
    return sorted(hosts.values(), key=lambda h: h.host), sorted(
        projects.values(), key=lambda p: -p.run_s
    )


def _note_start(host: HostLoad, r: RunRecord) -> None:
    at = r.at_start
    if at is None:
        return
    host.slots = max(host.slots or 0, at.slots)
    host.memory, host.memory_limit = (
        max(host.memory, at.memory),
        max(host.memory_limit, at.memory_limit),
    )
    host.cpus, host.cpus_limit = max(host.cpus, at.cpus), max(host.cpus_limit, at.cpus_limit)


def _fill(host: HostLoad, spans: list[Span], window_s: float) -> None:
    """Average and peak jobs at once, the busy share and the time every slot was taken, by a
    sweep over the runs' starts and ends."""
    total_s = sum(end - start for start, end in spans) / 1000
    host.average = total_s / window_s
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running, full_ms, since = 0, 0, 0
    for at, step in events:  # an end sorts before a start at the same instant
        if host.slots and running >= host.slots:
            full_ms += at - since
        running += step
        since = at
        host.peak = max(host.peak, running)
    if host.slots:
        host.busy = total_s / (host.slots * window_s)
        host.full_s = full_ms / 1000


def percentile(values: Sequence[float], pct: int) -> float | None:
    """Nearest rank: the smallest value with at least `pct` percent at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-pct * len(ordered) // 100))
    return ordered[rank - 1]


def _ms(text: str | None) -> int | None:
    return instant_ms(text) if text else None


# -- shown ---------------------------------------------------------------------------------


def text(hosts: list[HostLoad], projects: list[ProjectLoad], since: str) -> str:
    host_rows = [
        (
            h.host, str(h.runs), str(h.slots or "-"), _pct(h.busy), f"{h.average:.2f}", str(h.peak),
            _secs(h.full_s), _promised(h), _secs(h.wait_p50_s), _secs(h.wait_p95_s),
        )
        for h in hosts
    ]  # fmt: skip
    project_rows = [
        (
            p.project, str(p.runs), _secs(p.run_s), _secs(p.run_p50_s), _secs(p.run_p95_s),
            f"{p.memory / GIB:.1f} GiB" if p.memory else "-",
        )
        for p in projects
    ]  # fmt: skip
    host_header = (
        "HOST", "RUNS", "SLOTS", "BUSY", "AVG", "PEAK", "ALL SLOTS TAKEN", "MOST PROMISED",
        "WAIT P50", "WAIT P95",
    )  # fmt: skip
    project_header = ("PROJECT", "RUNS", "RUN TIME", "P50", "P95", "MOST MEMORY")
    return "\n\n".join(
        [
            f"capacity over the last {since}",
            "HOSTS\n" + _table(host_rows, host_header),
            "PROJECTS\n" + _table(project_rows, project_header),
        ]
    )


def as_json(hosts: list[HostLoad], projects: list[ProjectLoad], since_ms: int, now_ms: int) -> str:
    return json.dumps(
        {
            "since_ms": since_ms,
            "now_ms": now_ms,
            "hosts": [asdict(h) for h in hosts],
            "projects": [asdict(p) for p in projects],
        }
    )


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def _secs(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"


def _promised(h: HostLoad) -> str:
    if not h.memory_limit:
        return "-"
    return f"{h.memory / GIB:.1f}/{h.memory_limit / GIB:.1f} GiB, {h.cpus:g}/{h.cpus_limit:g} CPU"
