"""bench.compare's arithmetic on rows written by hand: no Redis, no peers installed."""

from __future__ import annotations

import pytest

from bench.compare import parse
from bench.peers.harness import Peer
from bench.peers.table import quiet, ratios, render, rotation, summarize


def run(rate: int, cmds: float = 1.0, cpu: float = 100.0, burst: float = 200.0) -> dict:
    return {
        "processed_per_s": rate,
        "redis_cmds_per_job": cmds,
        "process_cmds_per_job": cmds,
        "worker_cpu_us_per_job": cpu,
        "lateness_spread_p99_ms": 5.0,
        "lateness_burst_p99_ms": burst,
        "steal_pct": 0.0,
    }


def test_each_rep_starts_one_system_later_so_every_system_runs_in_every_slot() -> None:
    order = rotation(["dispatch", "bullmq", "arq"], 4)
    assert order == [
        ["dispatch", "bullmq", "arq"],
        ["bullmq", "arq", "dispatch"],
        ["arq", "dispatch", "bullmq"],
        ["dispatch", "bullmq", "arq"],
    ]
    assert rotation([], 2) == [[], []]


def test_the_summary_is_the_median_run_with_the_range_of_rates() -> None:
    rows = {
        "dispatch": [run(6_000, cpu=90), run(9_000, cpu=70), run(7_000, cpu=200)],
        "saq": [],
    }
    s = summarize(rows)
    assert list(s) == ["dispatch"]  # a system with no run is left out, not a zero
    assert (s["dispatch"]["jobs_per_s"], s["dispatch"]["cpu_us_per_job"]) == (7_000, 90)
    assert (s["dispatch"]["jobs_per_s_min"], s["dispatch"]["jobs_per_s_max"]) == (6_000, 9_000)
    assert s["dispatch"]["runs"] == 3


def test_ratios_are_dispatch_gates_off_and_on_over_each_peers_median() -> None:
    s = summarize(
        {
            "dispatch": [run(8_000)],
            "dispatch-gates": [run(6_000)],
            "bullmq": [run(4_000), run(5_000)],
            "arq": [run(2_000)],
        }
    )
    assert ratios(s) == {
        "dispatch": {"bullmq": 1.78, "arq": 4.0},
        "dispatch-gates": {"bullmq": 1.33, "arq": 3.0},
    }
    assert ratios(summarize({"bullmq": [run(1)]})) == {}  # no dispatch row, no ratio


def test_the_report_names_each_system_the_missing_installs_and_daemon_warnings() -> None:
    runs = {"dispatch": [run(8_000)], "bullmq": [run(4_000, cmds=24.5)]}
    runs["dispatch"][0]["daemon_warnings"] = {"lock_lost": 2}
    summary = summarize(runs)
    out = {
        "jobs": 20_000,
        "reps": 1,
        "redis": "7.0.15",
        "versions": {"bullmq": "6.7.0"},
        "not_installed": {"saq": "not installed (run make bench-peers)"},
        "configs": {"c50": {"summary": summary, "ratios": ratios(summary), "runs": runs}},
    }
    text = "\n".join(render(out))
    assert "8,000 (8,000-8,000)" in text
    assert "24.5" in text
    assert "dispatch / peer jobs/s: bullmq 2x" in text
    assert "saq: not installed (run make bench-peers)" in text
    assert "dispatch: daemon warnings over its runs: lock_lost 2" in text


def test_a_peer_whose_probe_cannot_run_is_not_installed() -> None:
    absent = Peer("ghost", ("true",), ("/nonexistent/bench/peers/.venv/bin/python", "-c", ""))
    assert absent.version() is None


def test_systems_and_configs_pick_a_subset_and_refuse_unknown_names() -> None:
    args = parse(["--systems", "dispatch,bullmq", "--configs", "c50"])
    assert (args.systems, args.configs, args.reps, args.jobs) == (
        ["dispatch", "bullmq"],
        ["c50"],
        3,
        20_000,
    )
    with pytest.raises(SystemExit):
        parse(["--systems", "celery"])


def test_a_stolen_run_is_told_from_a_quiet_one_and_counted_under_the_table() -> None:
    stolen = {**run(3_000), "steal_pct": 42.5}
    assert quiet(run(9_000), 10.0) and not quiet(stolen, 10.0) and quiet(stolen, 50.0)
    rows = {"dispatch": [run(9_000)], "bullmq": [run(6_000)]}
    summary = summarize(rows)
    result = {"summary": summary, "ratios": ratios(summary), "runs": rows}
    out = {"jobs": 10, "reps": 1, "versions": {}, "not_installed": {}}
    config = {**result, "stolen": {"bullmq": [stolen]}}
    text = "\n".join(render({**out, "configs": {"c50": config}}))
    assert "bullmq: 1 run(s) run again for steal (42.5%)" in text
    assert "dispatch / peer jobs/s: bullmq 1.5x" in text
