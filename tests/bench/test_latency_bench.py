"""The start-latency bench: its stamp is read as adjtimex prints it, and a few jobs through a
real daemon give every figure (the docker runner's beside the bare Engine API's)."""

from __future__ import annotations

import shutil

import pytest

from bench.latency import measure, parse, stamp_ns

pytestmark = pytest.mark.anyio

ADJTIMEX = """    mode:         0
-o  offset:       0 us
    status:       {status} (UNSYNC)
    time.tv_sec:  1796418719
    time.tv_usec: {sub}
    return value: 5 (clock not synchronized)
"""


def test_the_stamp_is_ns_with_sta_nano_else_us_and_a_plain_count_is_ns() -> None:
    assert stamp_ns(ADJTIMEX.format(status=8256, sub=241779659)) == 1796418719_241779659
    assert stamp_ns(ADJTIMEX.format(status=64, sub=241779)) == 1796418719_241779000
    assert stamp_ns("1796418719347835270\n") == 1796418719347835270
    with pytest.raises(ValueError, match="no time"):
        stamp_ns("adjtimex: not found")


@pytest.mark.skipif(shutil.which("busybox") is None, reason="busybox stamps the process runs")
async def test_a_few_jobs_on_the_process_runner() -> None:
    figures = await measure(parse(["--jobs", "3", "--runner", "process"]))
    run = figures["process"]
    assert run["jobs"] == 3 and 0 < run["daemon"]["p50"] <= run["daemon"]["max"]
    # the job may start before the submit's return is seen (a loaded machine): no order there
    assert "stage_run_ms" in run and run["stage_submit_ms"]["p50"] > 0


async def test_a_few_jobs_on_the_docker_runner_beside_the_bare_api(image: str) -> None:
    figures = await measure(parse(["--jobs", "2", "--runner", "docker", "--image", image]))
    run = figures["docker"]
    assert run["daemon"]["p50"] > 0 and run["bare"]["p50"] > 0
    assert set(run["daemon_minus_bare"]) == {"p50", "p95", "p99"}
