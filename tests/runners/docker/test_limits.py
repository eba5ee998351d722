"""The docker runner's last line of defence: no container without a memory and a CPU limit.

The engine here is a socket nobody listens on: a runner that tried to create the container
would answer `docker-unavailable`, so a refusal proves that nothing was asked of the engine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatch.model import Size
from dispatch.runners.docker import DockerClient, DockerRunner, DockerSettings
from tests.support.docker import make_ctx

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("settings", "size"),
    [
        (DockerSettings(default_memory="0"), None),
        (DockerSettings(default_memory="4g", default_cpus=0.001), None),
        (DockerSettings(), Size(memory="1m")),
        (DockerSettings(), Size(memory="2t")),
        (DockerSettings(), Size(cpus=1000.0)),
        (DockerSettings(), Size(cpus=float("inf"))),
        (DockerSettings(), Size(cpus=float("nan"))),
    ],
)
async def test_a_size_outside_the_bounds_is_refused_before_the_engine_is_asked(
    tmp_path: Path, settings: DockerSettings, size: Size | None
) -> None:
    async with DockerClient(f"unix://{tmp_path}/none.sock", timeout_s=2) as client:
        runner = DockerRunner(settings, client)
        result = await runner.run(make_ctx(tmp_path, "limits", ["true"], size=size))
    assert not result.started and result.refusal == "job-size-invalid"


async def test_a_size_within_the_bounds_reaches_the_engine(tmp_path: Path) -> None:
    async with DockerClient(f"unix://{tmp_path}/none.sock", timeout_s=2) as client:
        runner = DockerRunner(DockerSettings(), client)
        ctx = make_ctx(tmp_path, "limits", ["true"], size=Size(memory="6m", cpus=0.01))
        result = await runner.run(ctx)
    assert not result.started and result.error == "docker-unavailable"
