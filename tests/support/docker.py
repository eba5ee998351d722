"""Fixtures for tests against the real Docker engine (no mocks).

The engine and the test image come from `scripts/docker-up.sh` (run as root). When either is
missing these tests skip, saying why; with CI=true they fail instead, so CI cannot go green
without having run them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from dispatch.egress import firewall
from dispatch.egress.errors import EgressDown
from dispatch.model import Job
from dispatch.runners.base import RunContext
from dispatch.runners.docker import (
    DockerClient,
    DockerError,
    ImageMissing,
    resolve_host,
)
from tests.support.daemons import TEST_NETWORK

IMAGE = os.environ.get("DISPATCH_TEST_IMAGE", "dispatch-test:latest")


async def _engine_problem(host: str) -> str:
    async with DockerClient(host, timeout_s=5) as client:
        try:
            await client.connect()
            await client.image_inspect(IMAGE)
        except ImageMissing:
            return f"test image {IMAGE} is missing: run scripts/docker-up.sh as root"
        except DockerError as exc:
            return f"no Docker engine at {host} ({exc}): run scripts/docker-up.sh as root"
    return ""


@pytest.fixture(scope="session")
def docker_host() -> Iterator[str]:
    host = resolve_host()
    problem = asyncio.run(_engine_problem(host))
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    yield host
    asyncio.run(remove_network(host, TEST_NETWORK))


async def remove_network(host: str, name: str) -> None:
    """A test's job network and every firewall rule a daemon left for it (a killed one)."""
    with contextlib.suppress(EgressDown):
        await firewall.remove(f"{firewall.TAG} {name} ")
    async with DockerClient(host) as client:
        with contextlib.suppress(DockerError):  # gone, or a leftover container holds it
            await client.network_remove(name)


@pytest.fixture
async def docker(docker_host: str) -> AsyncIterator[DockerClient]:
    async with DockerClient(docker_host) as client:
        yield client


@pytest.fixture
def image(docker_host: str) -> str:
    return IMAGE


@pytest.fixture
def host_label() -> str:
    """A host name of this test's own, so label queries never see another test's containers."""
    return f"test-{uuid.uuid4().hex[:10]}"


def make_ctx(tmp_path: Path, host: str, command: list[str], **job: object) -> RunContext:
    job_id = f"t{uuid.uuid4().hex[:16]}"
    fields: dict[str, object] = {"image": IMAGE, **job}
    return RunContext(
        job=Job(id=job_id, command=command, **fields),  # type: ignore[arg-type]
        attempt=1,
        host=host,
        fence="7",
        output_dir=tmp_path / "out",
        output_file=f"{job_id}.log",
        grace_s=1.0,
    )
