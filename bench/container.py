"""How much a container run through DockerRunner costs next to the plain ways of doing it.

    python -m bench.container [--runs 20] [--image dispatch-test:latest] [--json]

Three ways to run `true`, interleaved round by round so drift in the engine hits all alike:

    runner  DockerRunner.run: preflight, labels, hardening, wait-before-start, log capture,
            exit inspection, removal
    cli     `docker run --rm IMAGE true`, the reference system's way
    api     the bare Engine API calls, made here: create, wait(next-exit), start, remove

One untimed warm-up round first. Prints medians in ms and the ratios runner/cli and
runner/api (targets: <= 0.95 and <= 1.10).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from dispatch.log import log
from dispatch.model import Job
from dispatch.runners.base import RunContext
from dispatch.runners.docker import DockerClient, DockerRunner, DockerSettings

Way = Callable[[], Awaitable[None]]


def _runner_way(runner: DockerRunner, image: str, out_dir: Path) -> Way:
    async def run() -> None:
        job = Job(id=f"bench{uuid.uuid4().hex[:12]}", image=image, command=["true"])
        ctx = RunContext(
            job=job,
            attempt=1,
            host="bench",
            fence="0",
            output_dir=out_dir,
            output_file=f"{job.id}.log",
        )
        result = await runner.run(ctx)
        if result.exit_code != 0:
            raise RuntimeError(f"runner: {result}")

    return run


def _cli_way(image: str) -> Way:
    docker = shutil.which("docker") or "docker"

    async def run() -> None:
        proc = await asyncio.create_subprocess_exec(docker, "run", "--rm", image, "true")
        if await proc.wait() != 0:
            raise RuntimeError("docker run failed")

    return run


def _api_way(client: DockerClient, image: str) -> Way:
    async def run() -> None:
        name = f"dispatch-bench-{uuid.uuid4().hex[:12]}"
        cid = await client.create_container(name, {"Image": image, "Cmd": ["true"]})
        waiter = await client.wait(cid, "next-exit")
        await client.start(cid)
        code = await waiter.result()
        await client.remove(cid)
        if code != 0:
            raise RuntimeError(f"api: exit {code}")

    return run


async def _timed(way: Way) -> float:
    began = time.perf_counter()
    await way()
    return (time.perf_counter() - began) * 1000


async def measure(runs: int, image: str) -> dict[str, float]:
    async with DockerClient() as client:
        await client.connect()
        with tempfile.TemporaryDirectory() as out_dir:
            runner = DockerRunner(DockerSettings(), client)
            ways = {
                "runner": _runner_way(runner, image, Path(out_dir)),
                "cli": _cli_way(image),
                "api": _api_way(client, image),
            }
            for way in ways.values():
                await way()  # warm-up: caches, first connection
            times: dict[str, list[float]] = {name: [] for name in ways}
            for _ in range(runs):
                for name, way in ways.items():
                    times[name].append(await _timed(way))
    return _summary(times)


def _summary(times: dict[str, list[float]]) -> dict[str, float]:
    medians = {f"{name}_ms": round(statistics.median(t), 1) for name, t in times.items()}
    return {
        **medians,
        "runner_vs_cli": round(medians["runner_ms"] / medians["cli_ms"], 3),
        "runner_vs_api": round(medians["runner_ms"] / medians["api_ms"], 3),
        "runs": float(len(times["runner"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--image", default="dispatch-test:latest")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    log.stream = open(os.devnull, "w")  # noqa: SIM115 - the runner's events are not the figures
    figures = asyncio.run(measure(args.runs, args.image))
    if args.json:
        print(json.dumps(figures))
        return
    for key, value in figures.items():
        print(f"{key:>14}  {value}")


if __name__ == "__main__":
    main()
