"""The pickup bench on a real Redis: every part it can leave out gives a figure of its own, and
every pickup it times ran; a part it does not know is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.pickup import WARM_UP, claims, measure, parse
from bench.queue import PARTS
from dispatch.model import decode_job

pytestmark = pytest.mark.anyio


async def test_each_part_left_out_gives_a_figure(redis_url: str, tmp_path: Path) -> None:
    args = parse(["--pickups", str(WARM_UP + 100), "--reps", "1", "--without", ",".join(PARTS)])
    figures = await measure(redis_url, tmp_path, args)
    names = ["full", *(f"without {part}" for part in PARTS), "without " + "+".join(PARTS)]
    assert [n for n in figures if n.endswith("_us")] == [n + "_us" for n in names]
    assert all(figures[n + "_us"] > 0 for n in names)


def test_an_unknown_part_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(["--without", "gates,nope"])
    assert exit_.value.code == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith("--without nope: not a part (one of gates,usage,tails,log)")
    )


def test_env_jobs_carry_that_many_values() -> None:
    assert parse(["--env", "3"]).env == 3
    [claim] = claims(1, env=3)
    assert decode_job(claim.data).plain_env() == {f"SETTING_{i}": f"value-{i}" for i in range(3)}


def test_a_negative_env_count_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(["--env", "-1"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("--env must be 0 or more")
