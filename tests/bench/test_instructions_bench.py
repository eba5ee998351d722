"""The instruction-count bench on a real Redis and a real valgrind: a daemon's instructions a
job come out, the spawn executable is put back after, and bad arguments are refused in one
line."""

from __future__ import annotations

from multiprocessing import spawn
from pathlib import Path

import pytest

from bench.instructions import counts, measure, parse

pytestmark = pytest.mark.anyio


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_a_gated_job_is_counted_in_instructions(redis_url: str, tmp_path: Path) -> None:
    before = spawn.get_executable()
    # a part taken off on the way through to the daemon (its effect: tests/bench/test_queue_parts)
    args = parse(["--gates", "--without", "tails", "--concurrency", "10", "--jobs", "40,120"])
    figures = await measure(redis_url, tmp_path, args)
    # a gated no-op job is about 270,000 here: the window only says a job, not a daemon start
    assert 50_000 < figures["c10 instructions_per_job"] < 2_000_000
    assert figures["daemon"] == "every gate without tails"
    assert spawn.get_executable() == before


def test_a_cachegrind_file_is_read_by_its_event_names(tmp_path: Path) -> None:
    out = tmp_path / "cg.1"
    out.write_text("desc: I1 cache\ncmd: python\nevents: Ir I1mr\nfl=x.c\n1 2 3\nsummary: 900 12\n")
    assert counts(out) == {"Ir": 900, "I1mr": 12}


def test_a_file_without_its_summary_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "cg.2"
    out.write_text("events: Ir\n")
    with pytest.raises(SystemExit, match="no summary line"):
        counts(out)


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--jobs", "500"], "--jobs takes two counts, the smaller first"),
        (["--jobs", "900,300"], "--jobs takes two counts, the smaller first"),
        (["--jobs", "a,b"], "--jobs a,b: not whole numbers, comma-separated"),
        (["--concurrency", "10,0"], "--concurrency 10,0: each must be 1 or more"),
        (["--without", "usage"], "--without takes parts off the gated daemon: give --gates too"),
        (
            ["--gates", "--without", "usage,spend"],
            "--without spend: not a part (one of gates,usage,tails,log, or gate:NAME)",
        ),
        (
            ["--gates", "--without", "gate:size,gate:sizes"],
            "--without gate:sizes: not a part (one of gates,usage,tails,log, or gate:NAME)",
        ),
    ],
)
def test_bad_arguments_are_refused_in_one_line(
    argv: list[str], reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(reason)
