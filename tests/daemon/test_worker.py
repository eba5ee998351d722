"""The daemon loop in-process, with the process runner and a real Redis."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path

import pytest
from redis.asyncio import Redis

from dispatch.client import Client
from dispatch.config.settings import Settings
from dispatch.daemon.processor import Processor, ProcessorSettings
from dispatch.daemon.worker import Timing, Worker
from dispatch.model import Job, new_id
from dispatch.queue.connect import redis_client
from dispatch.queue.transitions import NewJob
from dispatch.runners.process import ProcessRunner
from tests.support.polling import eventually
from tests.support.workers import FAST, make_settings

pytestmark = pytest.mark.anyio


@dataclass
class Daemon:
    worker: Worker
    client: Client
    settings: Settings
    stop: asyncio.Event
    task: asyncio.Task[None]

    async def submit(self, *command: str, **fields: object) -> str:
        job = Job(id=new_id(), command=list(command), **fields)  # type: ignore[arg-type]
        return (await self.client.submit(job)).id

    async def state(self, job_id: str) -> str:
        view = await self.client.get(job_id)
        return view.state if view else "missing"

    async def ended(self, job_id: str, timeout: float = 10.0) -> str:
        async def finished() -> str | None:
            state = await self.state(job_id)
            return state if state in ("completed", "failed", "cancelled") else None

        return await eventually(finished, timeout)


@contextlib.asynccontextmanager
async def running_daemon(settings: Settings, timing: Timing = FAST) -> AsyncIterator[Daemon]:
    redis = redis_client(settings.redis_url, socket_timeout=30)
    processor = Processor(
        ProcessorSettings(
            host=settings.host,
            output_dir=settings.state_dir / "output",
            stop_grace_s=settings.stop_grace_s,
            retry_base_ms=50,
        ),
        ProcessRunner(),
    )
    worker = Worker(settings, redis, processor, timing=timing)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    client = Client(redis, settings.prefix, "cli")
    try:
        await eventually(lambda: redis.exists(f"{settings.prefix}:host:{settings.host}"))
        yield Daemon(worker, client, settings, stop, task)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await redis.aclose()


@pytest.fixture
async def daemon(redis_url: str, prefix: str, tmp_path: Path) -> AsyncIterator[Daemon]:
    async with running_daemon(make_settings(redis_url, prefix, tmp_path)) as d:
        yield d


async def test_a_job_completes_and_is_recorded_locally_and_in_redis(daemon: Daemon) -> None:
    job_id = await daemon.submit("sh", "-c", "echo hello")
    assert await daemon.ended(job_id) == "completed"
    runs = await daemon.client.runs()
    assert [(r.id, r.outcome, r.exit_code, r.attempt) for r in runs] == [
        (job_id, "completed", 0, 1)
    ]
    local = list(daemon.worker.records.read())
    assert local[0].id == job_id and local[0].host == "h1"
    assert Path(runs[0].output or "").read_text() == "hello\n"


async def test_exit_codes_map_to_outcomes_and_infra_failures_retry(daemon: Daemon) -> None:
    refused = await daemon.submit("sh", "-c", "exit 2")
    broken = await daemon.submit("sh", "-c", "exit 1", attempts=2)
    assert await daemon.ended(refused) == "failed"
    assert await daemon.ended(broken) == "failed"
    outcomes = sorted(
        (r.id == broken, r.attempt, r.outcome, r.reason) for r in await daemon.client.runs()
    )
    assert outcomes == [
        (False, 1, "policy", "job-refused"),
        (True, 1, "infra", "exit-1"),
        (True, 2, "infra", "exit-1"),
    ]


async def test_a_delayed_job_waits_then_runs(daemon: Daemon) -> None:
    delay_ms = 1_000  # the first read comes at once: a whole second of margin for a slow host
    job = Job(id=new_id(), command=["true"])
    await daemon.client.submit(job, delay_ms=delay_ms)
    assert await daemon.state(job.id) == "delayed"
    assert await daemon.ended(job.id) == "completed"
    record = (await daemon.client.runs())[0]
    assert record.started_at and record.queued_at and record.started_at > record.queued_at
    # the wait itself, however late the reads above ran: not started before it was due
    assert _ms(record.started_at) - _ms(record.queued_at) >= delay_ms


async def test_cancel_of_a_running_job_stops_it_and_records_operator_cancel(
    daemon: Daemon, tmp_path: Path
) -> None:
    marker = tmp_path / "alive"
    job_id = await daemon.submit("sh", "-c", f"touch {marker}; sleep 30")
    await eventually(lambda: _exists(marker))
    answer = await daemon.client.cancel(job_id, wait_s=10)
    assert (answer.outcome, answer.host) == ("taken", "h1")
    assert await daemon.ended(job_id) == "cancelled"
    record = (await daemon.client.runs())[0]
    assert (record.outcome, record.reason) == ("cancelled", "operator-cancel")


async def test_cancel_before_start_removes_the_job(daemon: Daemon) -> None:
    job = Job(id=new_id(), command=["true"])
    await daemon.client.submit(job, delay_ms=3_600_000)
    answer = await daemon.client.cancel(job.id)
    assert answer.outcome == "cancelled"
    assert await daemon.state(job.id) == "cancelled"
    assert (await daemon.client.runs())[0].reason == "operator-cancel"


async def test_a_job_past_its_timeout_is_aborted(daemon: Daemon) -> None:
    job_id = await daemon.submit("sleep", "30", timeout_ms=1000)
    assert await daemon.ended(job_id) == "failed"
    record = (await daemon.client.runs())[0]
    assert (record.outcome, record.reason) == ("failed", "job-timeout")


async def test_a_lost_lock_stops_the_run(daemon: Daemon, redis: Redis, tmp_path: Path) -> None:
    marker = tmp_path / "alive"
    job_id = await daemon.submit("sh", "-c", f"touch {marker}; sleep 30")
    await eventually(lambda: _exists(marker))
    keys = daemon.worker.lanes["jobs"].queue.keys
    await redis.hset(keys.lock, job_id, "elsewhere:999")  # as if re-claimed by another host
    records = daemon.worker.records

    async def recorded() -> list[str]:
        return [r.reason for r in records.read() if r.id == job_id]

    assert await eventually(recorded) == ["lock-lost"]
    assert await daemon.state(job_id) == "active"  # the other claim's, untouched


async def test_a_job_claimed_again_while_its_old_claim_ends_runs_once_and_keeps_its_slot(
    redis_url: str, redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """A sweep handed the job back while this daemon still held its first claim (the soak saw
    it after a Redis pause longer than the lock) and the daemon claimed it again: the first
    claim is lost for good, so its run is stopped, and ending it must not drop the second."""
    # renewals far apart, so only the second claim can tell the daemon the first is lost
    settings = make_settings(redis_url, prefix, tmp_path, lock_ms=30_000, renew_s=5.0)
    trace = tmp_path / "trace"
    script = f"echo start >> {trace}; sleep 2; echo end >> {trace}"
    async with running_daemon(settings) as d:
        job_id = await d.submit("sh", "-c", script)
        await eventually(lambda: _lines_are(trace, ["start"]))
        keys = d.worker.lanes["jobs"].queue.keys
        await redis.zadd(keys.active, {job_id: 0})  # its deadline passed: the sweeper takes it
        assert await d.ended(job_id) == "completed"
        await eventually(lambda: _is(d.worker.capacity.free, settings.concurrency))
        assert not d.worker.running
    assert _read(trace) == ["start", "start", "end"]  # the first run stopped, the second ran


async def test_shutdown_aborts_a_long_job_and_puts_it_back_without_spending(
    redis_url: str, redis: Redis, prefix: str, tmp_path: Path
) -> None:
    settings = make_settings(redis_url, prefix, tmp_path, shutdown_grace_s=0.3)
    marker = tmp_path / "alive"
    async with running_daemon(settings) as d:
        job_id = await d.submit("sh", "-c", f"touch {marker}; sleep 30")
        await eventually(lambda: _exists(marker))
    found = await Client(redis, prefix).get(job_id)
    assert found and found.state == "delayed" and found.attempt == 1
    assert found.defer and found.defer.reason == "shutdown"


async def test_a_bad_document_in_redis_is_refused_not_run(daemon: Daemon, redis: Redis) -> None:
    queue = daemon.worker.lanes["jobs"].queue
    await queue.enqueue([NewJob("raw1", b'{"id": "raw1", "command": "not-a-list"}')])
    assert await daemon.ended("raw1") == "failed"
    record = (await daemon.client.runs())[0]
    assert (record.outcome, record.reason) == ("policy", "invalid-job")


async def test_a_refusal_keeps_its_sentence_in_the_result_and_both_records(daemon: Daemon) -> None:
    queue = daemon.worker.lanes["jobs"].queue
    await queue.enqueue([NewJob("raw2", b'{"id": "raw2", "attempts": 0}')])
    assert await daemon.ended("raw2") == "failed"
    view = await daemon.client.get("raw2")
    assert view and view.result and view.result.reason == "invalid-job"
    sentence = view.result.sentence
    assert "attempts must be between 1 and 100" in sentence
    (fleet,) = await daemon.client.runs()
    (local,) = [r for r in daemon.worker.records.read() if r.id == "raw2"]
    assert fleet.sentence == local.sentence == sentence


async def test_a_job_from_a_newer_release_is_deferred(daemon: Daemon) -> None:
    queue = daemon.worker.lanes["jobs"].queue
    await queue.enqueue([NewJob("future1", b'{"id": "future1", "v": 99, "shiny": true}')])
    await queue.enqueue([NewJob("future2", b'{"id": "future2", "v": 99}')])  # shaped like ours

    async def deferred(job_id: str) -> bool:
        view = await daemon.client.get(job_id)
        return bool(view and view.defer and view.defer.reason == "newer-release")

    for job_id in ("future1", "future2"):
        await eventually(partial(deferred, job_id))
        assert await daemon.state(job_id) == "delayed"


async def _exists(path: Path) -> bool:
    return path.exists()


def _ms(instant: str) -> int:
    """An ISO-8601 UTC instant of a record as epoch milliseconds."""
    return round(datetime.fromisoformat(instant).timestamp() * 1000)


def _read(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def _lines_are(path: Path, lines: list[str]) -> bool:
    return _read(path) == lines


async def _is(value: object, wanted: object) -> bool:
    return value == wanted
