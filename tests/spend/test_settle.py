"""A run's spend, end to end through the processor: the spend gate reserves, the runner hands the
job `$DISPATCH_USAGE`, and the report settles the reservation up or down; a run that never
started gives it all back. Real Redis, real process runner, real Docker engine for the image."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from redis.asyncio import Redis

from dispatch.clock import SystemClock
from dispatch.config.limits import zone
from dispatch.config.schemas import ConfigSnapshot, Overlay, ScopedLimit
from dispatch.daemon.processor import Processor, ProcessorSettings
from dispatch.gates.spend import SpendGate
from dispatch.model import Job, RunRecord
from dispatch.reasons import IMAGE_MISSING
from dispatch.runners.base import AbortSignal, Runner
from dispatch.runners.docker import DockerClient, DockerRunner, DockerSettings
from dispatch.runners.process import ProcessRunner
from dispatch.spend import usage_report
from dispatch.spend.ledger import SpendLedger
from dispatch.spend.plan import MICRO
from dispatch.spend.windows import window
from tests.support.pickups import claim_of

pytestmark = pytest.mark.anyio
ROWS = [{"scope": "*", "day": 100, "dayUsd": 100, "dailyTokens": 1_000_000}]


@pytest.fixture
async def ledger(redis: Redis, prefix: str) -> AsyncIterator[SpendLedger]:
    spend = SpendLedger(redis, prefix, retry_s=())
    yield spend
    await spend.drain()


def config(**overlay: Any) -> ConfigSnapshot:
    limits = tuple(msgspec.convert(row, ScopedLimit) for row in ROWS)
    return ConfigSnapshot(limits=limits, overlay=msgspec.convert(overlay, Overlay))


def processor(tmp_path: Path, ledger: SpendLedger, runner: Runner, **overlay: Any) -> Processor:
    settings = ProcessorSettings(
        host="h", output_dir=tmp_path / "out", usage_dir=tmp_path / "usage"
    )
    gates = [SpendGate(ledger, SystemClock())]
    return Processor(settings, runner, gates, config=lambda: config(**overlay))


async def run(p: Processor, ledger: SpendLedger, job: Job) -> RunRecord:
    ending = await p.process(claim_of(job), AbortSignal())
    await ledger.drain()
    assert ending.record is not None
    return ending.record


async def counter(ledger: SpendLedger, metric: str) -> tuple[int, int]:
    period = window("day", SystemClock().now_ms(), zone("UTC")).period
    key = ledger.keys.counter(f"{metric}:*:{period}")
    used, held = await ledger.redis.hmget(key, "used", "held")
    return int(used or 0), int(held or 0)


def reporting(report: str, code: int = 0) -> list[str]:
    return ["/bin/sh", "-c", f"printf '%s' '{report}' > \"$DISPATCH_USAGE\"; exit {code}"]


@pytest.mark.parametrize("cost", [0.42, 3.5])  # below and above the reserved $2
async def test_a_reported_cost_settles_the_reservation_up_or_down(
    tmp_path: Path, ledger: SpendLedger, cost: float
) -> None:
    report = f'{{"costUsd": {cost}, "tokens": {{"input": 1200, "output": 300}}}}'
    job = Job(id="j1", command=reporting(report), max_cost_usd=2)
    record = await run(processor(tmp_path, ledger, ProcessRunner()), ledger, job)
    assert (record.budget_reserved, record.cost_usd, record.tokens) == (True, cost, 1500)
    assert await counter(ledger, "usd") == (round(cost * MICRO), 0)
    assert await counter(ledger, "runs") == (1, 0)
    assert await counter(ledger, "tokens") == (1500, 0)
    (slot,) = (tmp_path / "usage").iterdir()  # kept for the next run, with nothing in it
    assert list(slot.iterdir()) == []


async def test_each_run_gets_its_own_report_name_in_a_reused_dir(tmp_path: Path, ledger) -> None:
    seen = tmp_path / "seen"
    job = Job(id="j1", command=["/bin/sh", "-c", f'echo "$DISPATCH_USAGE" >> {seen}'])
    p = processor(tmp_path, ledger, ProcessRunner(), maxCostUsd=2)
    await run(p, ledger, job)
    await run(p, ledger, msgspec.structs.replace(job, id="j2"))
    first, second = (Path(line) for line in seen.read_text().splitlines())
    assert first.parent == second.parent and first.name != second.name


OUT_OF_BOUND = [
    '{"tokens": {"output": 1152921504606846976}}',  # 2^60: the settle would be a bad call
    '{"tokens": {"input": 1, "output": 100000000000000000000000}}',
    '{"costUsd": 0.5, "tokens": {"input": 1125899906842625}}',  # 2^50 + 1
    '{"costUsd": 1000000001}',
]


@pytest.mark.parametrize(
    "report", ["", "not json", '{"costUsd": -1}', '{"tokens": 5}', *OUT_OF_BOUND]
)
async def test_no_report_or_a_malformed_one_settles_at_the_reserved_amount(
    tmp_path: Path, ledger: SpendLedger, report: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged: list[str] = []
    monkeypatch.setattr(usage_report, "event", lambda name, **_: logged.append(name))
    command = reporting(report) if report else ["/bin/true"]
    job = Job(id="j1", command=command)
    p = processor(tmp_path, ledger, ProcessRunner(), maxCostUsd=2)  # the settings' default cap
    record = await run(p, ledger, job)
    assert (record.budget_reserved, record.cost_usd, record.tokens) == (True, 2.0, None)
    assert await counter(ledger, "usd") == (2 * MICRO, 0)
    assert await counter(ledger, "runs") == (1, 0)
    assert logged == (["usage_report_malformed"] if report else [])


async def test_the_largest_report_in_bounds_settles_in_full(tmp_path: Path, ledger) -> None:
    report = (
        '{"costUsd": 1000000000, "tokens": {"input": 1125899906842624, "output": 1125899906842624}}'
    )
    job = Job(id="j1", command=reporting(report), max_cost_usd=2)
    record = await run(processor(tmp_path, ledger, ProcessRunner()), ledger, job)
    assert (record.cost_usd, record.tokens) == (1e9, 2**51)
    assert await counter(ledger, "usd") == (10**15, 0)
    assert await counter(ledger, "tokens") == (2**51, 0)


async def test_a_report_path_written_as_a_link_is_not_followed(tmp_path: Path, ledger) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"costUsd": 0.01}')
    job = Job(id="j1", command=["/bin/sh", "-c", f'ln -s {secret} "$DISPATCH_USAGE"'])
    record = await run(processor(tmp_path, ledger, ProcessRunner(), maxCostUsd=2), ledger, job)
    assert record.cost_usd == 2.0


@pytest.mark.parametrize("code", [125, 126, 127])
async def test_a_run_that_started_is_charged_whatever_its_exit(
    tmp_path: Path, ledger: SpendLedger, code: int
) -> None:
    """A job whose last command is missing exits 127 after spending: the caps must see it.
    Before, 125-127 were refunded in full (and the job retried, uncounted, again and again)."""
    job = Job(id="j1", command=reporting('{"costUsd": 1.5}', code), max_cost_usd=2)
    record = await run(processor(tmp_path, ledger, ProcessRunner()), ledger, job)
    assert (record.exit_code, record.budget_reserved, record.cost_usd) == (code, True, 1.5)
    assert await counter(ledger, "runs") == (1, 0)
    assert await counter(ledger, "usd") == (1_500_000, 0)


async def test_a_command_that_never_started_refunds_everything(
    tmp_path: Path, ledger: SpendLedger
) -> None:
    job = Job(id="j1", command=[str(tmp_path / "no-such-command")], max_cost_usd=2)
    record = await run(processor(tmp_path, ledger, ProcessRunner()), ledger, job)
    assert (record.started_at, record.budget_reserved, record.cost_usd) == (None, False, None)
    assert await counter(ledger, "runs") == (0, 0)
    assert await counter(ledger, "usd") == (0, 0)


async def test_a_missing_image_refunds_everything(
    tmp_path: Path, ledger: SpendLedger, docker: DockerClient
) -> None:
    runner = DockerRunner(DockerSettings(default_memory="64m", default_cpus=0.5), docker)
    job = Job(id="j1", image="dispatch-test:no-such-tag", command=["true"], max_cost_usd=2)
    record = await run(processor(tmp_path, ledger, runner), ledger, job)
    assert (record.reason, record.budget_reserved) == (IMAGE_MISSING, False)
    assert await counter(ledger, "runs") == (0, 0)
    assert await counter(ledger, "usd") == (0, 0)


async def test_a_container_reports_through_its_bound_usage_dir(
    tmp_path: Path, ledger: SpendLedger, docker: DockerClient, image: str
) -> None:
    runner = DockerRunner(DockerSettings(default_memory="64m", default_cpus=0.5), docker)
    report = '{"costUsd": 0.25, "tokens": {"input": 10, "output": 5}}'
    job = Job(id="j1", image=image, command=reporting(report), max_cost_usd=2)
    record = await run(processor(tmp_path, ledger, runner), ledger, job)
    assert (record.exit_code, record.cost_usd, record.tokens) == (0, 0.25, 15)
    assert await counter(ledger, "usd") == (250_000, 0)
