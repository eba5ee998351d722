"""A stop that never takes (issue 25, item 9): the daemon in-process, the docker runner on the
real engine, and an engine whose stop and kill calls hang (the seam: the real client, each such
call held open for ever until `back` is set; calls made after it go through).

The job keeps its claim and its holds while its container lives; past the grace it is told, once
(`stop_did_not_take`), in its owner's heartbeat, in `dispatch why` and in `dispatch doctor`;
`dispatch cancel --kill` sends the engine's kill again, and once the container is gone the
attempt ends once, cancelled. No sleeps: every condition is polled with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from dispatch.cli.doctor.checks import fleet_checks
from dispatch.cli.views import why_text
from dispatch.client import Client
from dispatch.config.settings import Settings
from dispatch.daemon.processor import Processor, ProcessorSettings
from dispatch.daemon.worker import Timing, Worker
from dispatch.model import Job, new_id
from dispatch.queue.connect import redis_client
from dispatch.reasons import CANCELLED, OPERATOR_CANCEL
from dispatch.runners.docker import DockerClient, DockerRunner, DockerSettings
from dispatch.runners.docker.spec import container_name
from tests.support.docker import IMAGE
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio

TIMING = Timing(heartbeat_s=0.2, block_s=1.0, idle_claim_s=2.0, stop_slack_s=0.3)
RUNNER = DockerSettings(default_memory="64m", default_cpus=0.5, pids_limit=16)


class HungEngine(DockerClient):
    """The real client; a stop or kill sent before `back` is set never answers."""

    def __init__(self, host: str) -> None:
        super().__init__(host)
        self.back = asyncio.Event()
        self.hung: list[str] = []

    async def _hang(self, what: str) -> None:
        if not self.back.is_set():
            self.hung.append(what)
            await asyncio.Event().wait()  # cancelled with its caller, never answered

    async def stop(self, container: str, grace_s: float) -> bool:
        await self._hang("stop")
        return await super().stop(container, grace_s)

    async def kill(self, container: str, signal: str = "KILL") -> None:
        await self._hang("kill")
        await super().kill(container, signal)


@contextlib.asynccontextmanager
async def daemon(settings: Settings, engine: DockerClient) -> AsyncIterator[Worker]:
    redis = redis_client(settings.redis_url, socket_timeout=30)
    processor = Processor(
        ProcessorSettings(settings.host, settings.state_dir / "output", settings.stop_grace_s),
        DockerRunner(RUNNER, engine),
    )
    worker = Worker(settings, redis, processor, timing=TIMING)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await redis.aclose()


def events(logged: io.StringIO, name: str) -> list[dict]:
    rows = [json.loads(line) for line in logged.getvalue().splitlines() if line.startswith("{")]
    return [row for row in rows if row.get("event") == name]


async def test_a_stop_that_never_takes_is_seen_and_cancel_kill_ends_it(
    redis_url: str, prefix: str, tmp_path: Path, docker_host: str, logged: io.StringIO
) -> None:
    settings = Settings(
        redis_url=redis_url, embedded=False, prefix=prefix, host="h1",
        state_dir=tmp_path / "state", lock_ms=3000, stop_grace_s=0.5, shutdown_grace_s=1.0,
        renew_s=0.2, sweep_s=0.3,
    )  # fmt: skip
    redis = redis_client(redis_url, socket_timeout=30)
    client = Client(redis, prefix, "cli")
    job = Job(id=new_id(), command=["sleep", "300"], image=IMAGE)
    name = container_name(job.id)
    engine = HungEngine(docker_host)
    async with engine, DockerClient(docker_host) as docker:
        try:
            async with daemon(settings, engine):
                await client.submit(job)

                async def running() -> bool:
                    with contextlib.suppress(Exception):
                        return (await docker.inspect(name))["State"]["Running"] is True
                    return False

                await eventually(running, timeout=30)
                assert (await client.cancel(job.id, 5.0)).outcome == "taken"

                async def stuck() -> dict | None:
                    view = await client.get(job.id)
                    return await client.stuck_stop(view) if view else None

                seen = await eventually(stuck, timeout=10)
                assert seen["run"] == f"container {name}" and seen["reason"] == OPERATOR_CANCEL
                view = await client.get(job.id)
                assert view is not None and view.state == "active"
                story = why_text(view, [], seen)
                assert "It is stopping since " in story and " UTC (operator-cancel)" in story
                assert f"container {name} still alive on h1" in story
                assert f"dispatch cancel --kill {job.id}" in story
                doctor = [c for c in await fleet_checks(replace(settings, host="cli"))]
                [line] = [c for c in doctor if c.name == "stop-not-taken"]
                assert line.warn and name in line.detail
                assert await running(), "the container lives: nothing ended it"

                # while the engine still hangs, the kill is sent and does not take either
                answer = await client.cancel(job.id, 1.0, kill=True)
                assert answer.outcome == "kill-sent" and answer.host == "h1"
                still = await client.get(job.id)
                assert await running() and still is not None and still.state == "active"

                engine.back.set()  # the runner's own calls stay hung; a new kill goes through
                answer = await client.cancel(job.id, 20.0, kill=True)
                assert answer.outcome == "killed", answer
                ended = await client.get(job.id)
                assert ended is not None and ended.state == "cancelled"
                records = await client.records_of(ended)
                assert [(r.attempt, r.outcome, r.reason) for r in records] == [
                    (1, CANCELLED, OPERATOR_CANCEL)
                ]
            [told] = events(logged, "stop_did_not_take")  # once, though told every beat since
            assert told["run"] == f"container {name}" and told["job"] == job.id
            assert len(events(logged, "kill_taken")) == 2
            assert "stop" in engine.hung and "kill" in engine.hung
        finally:
            with contextlib.suppress(Exception):
                await docker.remove(name, force=True)
            await redis.aclose()
