"""The soak's counting rules, on marks written by hand: which reruns are defects."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import parse
from bench.soak_runs import Evidence, Fault, tally
from dispatch.queue.items import Retention

DAEMON = 100
HOST = {DAEMON: "soak-1", 200: "soak-2"}


def marks(tmp: Path, job: str, lines: list[str]) -> None:
    (tmp / job).write_text("".join(f"{line}\n" for line in lines))


def evidence(*faults: Fault) -> Evidence:
    return Evidence(faults=list(faults), gone_ns={}, host_of=HOST, stopped_ns={})


def test_a_rerun_after_its_daemon_froze_is_unreported_not_completed_twice(tmp_path: Path) -> None:
    marks(tmp_path, "j", ["s 10 1 100", "e 20 1 100", "s 50 2 200", "e 60 2 200"])
    freeze = Fault(kind="freeze", target="soak-1", pid=DAEMON, start_ns=15, end_ns=40)
    out = tally(tmp_path, {"j": 70}, evidence(freeze))
    assert (out.completed_twice, out.reran_unreported) == (0, 1)
    assert out.causes == {"freeze": 1}


def test_a_rerun_with_no_fault_or_only_a_redis_pause_is_completed_twice(tmp_path: Path) -> None:
    marks(tmp_path, "a", ["s 10 1 100", "e 20 1 100", "s 50 2 200", "e 60 2 200"])
    marks(tmp_path, "b", ["s 10 3 100", "e 20 3 100", "s 50 4 200", "e 60 4 200"])
    pause = Fault(kind="pause", target="redis", pid=7, start_ns=15, end_ns=40)
    out = tally(tmp_path, {"a": 70, "b": 70}, evidence(pause))
    assert (out.completed_twice, out.reran_unreported) == (2, 0)
    assert sorted(out.unexplained) == ["a", "b"]


def test_a_fault_on_another_daemon_explains_nothing(tmp_path: Path) -> None:
    marks(tmp_path, "j", ["s 10 1 100", "e 20 1 100", "s 50 2 200", "e 60 2 200"])
    kill = Fault(kind="kill", target="soak-2", pid=200, start_ns=15, end_ns=40)
    assert tally(tmp_path, {"j": 70}, evidence(kill)).completed_twice == 1


def test_overlapping_runs_are_counted_whatever_the_faults(tmp_path: Path) -> None:
    marks(tmp_path, "j", ["s 10 1 100", "s 15 2 200", "e 20 1 100", "e 60 2 200"])
    freeze = Fault(kind="freeze", target="soak-1", pid=DAEMON, start_ns=0, end_ns=40)
    assert tally(tmp_path, {"j": 70}, evidence(freeze)).overlapping_runs == 1


def test_the_soak_takes_its_daemons_slots_and_refuses_none() -> None:
    from bench.soak import parse

    assert parse([]).concurrency == 8
    assert parse(["--concurrency", "40"]).concurrency == 40
    with pytest.raises(SystemExit) as refused:
        parse(["--concurrency", "0"])
    assert refused.value.code == 2


def test_the_soak_refuses_more_jobs_than_the_queue_keeps_results_of(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Past the retention the oldest results are trimmed before the soak reads them, and it
    would count those jobs lost: it says so instead, in one line."""
    keep = Retention().keep_done
    assert parse(["--jobs", str(keep)]).jobs == keep
    with pytest.raises(SystemExit) as exited:
        parse(["--jobs", str(keep + 1)])
    assert exited.value.code == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "finished jobs" in x]
    assert f"--jobs is {keep + 1}" in line
