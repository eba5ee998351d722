"""`dispatch capacity`'s arithmetic over built run records: jobs at once by a sweep, the busy
share and the time every slot was taken, waits and run times by nearest rank, runs clipped to
the window (tests/e2e/test_fleet_surfaces.py runs the command on real daemons)."""

from __future__ import annotations

from dispatch.cli.capacity import measure, percentile, text
from dispatch.model import AtStart, RunRecord, iso

S = 1000


def run(
    host: str,
    start_s: int,
    end_s: int,
    *,
    queued_s: int | None = None,
    project: str | None = None,
    memory: int | None = None,
    slots: int = 2,
) -> RunRecord:
    return RunRecord(
        id=f"{host}{start_s}", attempt=1, host=host, queue="jobs", outcome="completed",
        queued_at=iso((queued_s if queued_s is not None else start_s) * S),
        started_at=iso(start_s * S), ended_at=iso(end_s * S), project=project, memory=memory,
        at_start=AtStart(running=1, slots=slots, memory=2**30, memory_limit=4 * 2**30, cpus=1,
                         cpus_limit=4),
    )  # fmt: skip


def test_a_hosts_load_over_the_window() -> None:
    records = [
        run("a", 0, 40, queued_s=0),
        run("a", 10, 30, queued_s=4),  # 10..30: both slots taken
        run("a", 50, 150, queued_s=42),  # runs past the window's end: clipped at 100
        run("b", -50, 10, slots=1),  # began before the window: clipped at 0
    ]
    [a, b], _ = measure(records, since_ms=0, now_ms=100 * S)
    assert (a.runs, a.slots, a.peak) == (3, 2, 2)
    assert a.average == (40 + 20 + 50) / 100
    assert a.busy == 110 / 200 and a.full_s == 20
    assert (a.wait_p50_s, a.wait_p95_s) == (6, 8)  # waits 0, 6, 8
    assert (a.memory, a.memory_limit, a.cpus_limit) == (2**30, 4 * 2**30, 4)
    assert (b.peak, b.full_s, b.busy) == (1, 10, 0.1)


def test_runs_back_to_back_are_never_two_at_once() -> None:
    [a], _ = measure([run("a", 0, 10, slots=1), run("a", 10, 20, slots=1)], 0, 20 * S)
    assert a.peak == 1 and a.full_s == 20


def test_projects_and_runs_that_never_started() -> None:
    refused = RunRecord(id="r", attempt=1, host="a", queue="jobs", outcome="policy", project="web")
    records = [
        run("a", 0, 10, project="web", memory=2**31),
        run("a", 0, 30, project="web", memory=2**30),
        refused,
        run("a", 0, 5),
    ]
    [host], [web, none] = measure(records, 0, 100 * S)
    assert host.runs == 3  # the refusal ran nowhere
    assert (web.project, web.runs, web.run_s, web.memory) == ("web", 3, 40, 2**31)
    assert (web.run_p50_s, web.run_p95_s) == (10, 30)
    assert (none.project, none.runs) == ("-", 1)
    shown = text([host], [web, none], "24h")
    assert shown.startswith("capacity over the last 24h") and "2.0 GiB" in shown


def test_a_run_within_one_millisecond_still_counts_as_running() -> None:
    [a], _ = measure([run("a", 5, 5, slots=1)], 0, 10 * S)
    assert a.peak == 1 and a.full_s == 0.001


def test_records_without_a_start_snapshot_leave_the_slots_unknown() -> None:
    old = RunRecord(
        id="o", attempt=1, host="old", queue="jobs", outcome="completed",
        started_at=iso(0), ended_at=iso(10 * S),
    )  # fmt: skip
    [h], _ = measure([old], 0, 10 * S)
    assert (h.slots, h.busy, h.full_s, h.peak, h.average) == (None, None, None, 1, 1.0)


def test_percentile_is_the_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([3, 1, 2], 50) == 2 and percentile([3, 1, 2], 95) == 3
    assert percentile(list(range(1, 101)), 95) == 95
