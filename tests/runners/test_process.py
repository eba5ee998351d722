"""The process runner when its output cannot be written: the job's own exit still decides."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatch.model import Job
from dispatch.runners.base import RunContext, classify
from dispatch.runners.process import ProcessRunner

pytestmark = pytest.mark.anyio


async def test_a_full_disk_loses_the_output_not_the_run() -> None:
    # 1 MiB of output: far past a pipe's buffer, so the child blocks unless it is drained
    command = ["sh", "-c", "head -c 1048576 /dev/zero; exit 0"]
    ctx = RunContext(
        job=Job(id="j", command=command), attempt=1, host="h", fence="1",
        output_path=Path("/dev/full"),
    )  # fmt: skip
    result = await ProcessRunner().run(ctx)
    assert (result.exit_code, result.output_lost) == (0, True)
    assert classify(result, "") == ("completed", "")
