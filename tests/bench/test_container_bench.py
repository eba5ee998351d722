"""The container bench: its spec is the one the runner sends, the CLI gets all of it as flags,
each hardening step comes out alone, and a round on the engine gives every figure."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from bench.container import (
    STEPS,
    Bench,
    cli_args,
    hardened_body,
    job_folders,
    measure,
    step_summary,
    without_step,
)
from dispatch.runners.docker import DockerSettings

pytestmark = pytest.mark.anyio


@pytest.fixture
async def body() -> AsyncIterator[dict]:
    with job_folders() as (folder, out, usage):
        settings = DockerSettings(allowed_roots=(str(folder.parent),), network="bench-net")
        bench = Bench(None, settings, folder, out, usage, "some-image:1")  # type: ignore[arg-type]
        yield await hardened_body(settings, bench.ctx())


async def test_the_body_is_the_runners_hardened_one(body: dict) -> None:
    host = body["HostConfig"]
    assert host["Init"] and host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"]
    assert host["NetworkMode"] == "bench-net" and set(host["Tmpfs"]) == {"/tmp", "/home/dispatch"}
    assert [m["Target"] for m in host["Mounts"]] == ["/work", "/run/dispatch-usage"]
    assert body["User"] == ("65534:65534" if os.geteuid() == 0 else f"{os.getuid()}:{os.getgid()}")


async def test_the_cli_gets_every_field_and_refuses_one_it_does_not_know(body: dict) -> None:
    args = cli_args(body)
    wanted = [
        "--init",
        "--read-only",
        "--cap-drop=ALL",
        "--network=bench-net",
        "--log-driver=local",
    ]
    assert set(wanted) <= set(args)
    assert args[-2:] == ["some-image:1", "true"]
    with pytest.raises(ValueError, match="Devices"):
        cli_args({**body, "HostConfig": {**body["HostConfig"], "Devices": []}})


async def test_each_step_comes_out_alone_and_leaves_the_body_whole(body: dict) -> None:
    variants = {name: without_step(body, name) for name in STEPS}
    assert all(v != body for v in variants.values())
    assert "Init" not in variants["init"]["HostConfig"] and body["HostConfig"]["Init"]
    assert variants["job_network"]["HostConfig"].get("NetworkMode") is None


def test_a_steps_delta_is_the_whole_bodys_median_less_its_own() -> None:
    times = {"full": [300.0, 310.0, 320.0]} | {name: [290.0, 300.0, 400.0] for name in STEPS}
    figures = step_summary(times)
    assert figures["full_ms"] == 310.0 and figures["init_delta_ms"] == 10.0


async def test_a_round_of_each_way_on_the_engine(image: str) -> None:
    figures = await measure(1, image, steps=False)
    assert figures["runs"] == 1.0
    assert figures["runner_ms"] > 0 and figures["cli_ms"] > 0 and figures["api_ms"] > 0
    assert figures["runner_removed_ms"] >= figures["runner_ms"]  # its removal ends after it
