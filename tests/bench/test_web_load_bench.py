"""The web page's load bench, for a second on the test Redis: it opens its streams, submits
at its rate and reads the page's frames and commands (its figures are not judged here)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from bench.support.children import children
from bench.web_load import parse, run

pytestmark = pytest.mark.anyio


async def test_the_web_load_bench_counts_frames_and_commands(
    redis_url: str, tmp_path: Path
) -> None:
    argv = ["--seconds", "2.5", "--streams", "2", "--rate", "200", "--idle-s", "1.2"]
    args = parse([*argv, "--calibrate", "100"])
    args.prefix = f"bw{uuid.uuid4().hex[:8]}"
    with children() as kids:
        figures = await run(kids, redis_url, tmp_path, args)
    assert figures["streams"] == 2
    assert 0 < figures["submitted_per_s"] <= 200
    assert figures["events_per_stream_per_s"] > 0
    assert figures["frame_gap_p50_ms"] >= 900  # a frame at most once a second
    assert figures["submit_cmds"][0] > 0 and figures["read_p50_ms"] > 0
    assert all(d.proc is not None and d.proc.poll() is not None for d in kids.daemons)
