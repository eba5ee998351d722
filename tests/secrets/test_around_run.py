"""A job with secret references through the processor and the process runner: the value
reaches the run's environment and nothing dispatch keeps (ending, record, output, log)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from pathlib import Path

import msgspec
import pytest

from dispatch import log
from dispatch.config.schemas import ConfigSnapshot, SecretProfile
from dispatch.daemon.processor import Ending, Processor, ProcessorSettings
from dispatch.model import DeferRecord, Job, Result, SecretRef
from dispatch.reasons import CANCELLED, OPERATOR_CANCEL, SECRET_UNRESOLVED
from dispatch.runners.base import AbortSignal
from dispatch.runners.process import ProcessRunner
from tests.support.pickups import claim_of
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio

VALUE = "sk-live-0123456789abcdefXYZ"


def private_file(tmp_path: Path) -> str:
    path = tmp_path / "values.json"
    path.write_text(json.dumps({"openai": VALUE}))
    path.chmod(0o600)
    return str(path)


def processor(tmp_path: Path, profiles: dict[str, SecretProfile]) -> Processor:
    config = ConfigSnapshot(secrets=profiles)
    settings = ProcessorSettings("h", tmp_path / "out", stop_grace_s=0.5)
    return Processor(settings, ProcessRunner(), config=lambda: config)


def secret_job(script: str, ref: str = "disk/openai") -> Job:
    env: dict[str, str | SecretRef] = {"OPENAI_API_KEY": SecretRef(secret=ref), "PLAIN": "visible"}
    return Job(id="j1", command=["sh", "-c", script], env=env, attempts=2)


def everything_kept(ending: Ending, logged: str) -> str:
    record = msgspec.json.encode(ending.record).decode() if ending.record else ""
    output = (
        Path(ending.record.output).read_text() if ending.record and ending.record.output else ""
    )
    return "\n".join([ending.payload.decode(), ending.cancelled.decode(), record, output, logged])


async def run(proc: Processor, job: Job, signal: AbortSignal | None = None) -> tuple[Ending, str]:
    stream = io.StringIO()
    before = log.log.stream
    log.log.stream = stream
    try:
        ending = await proc.process(claim_of(job), signal or AbortSignal())
    finally:
        log.log.stream = before
    return ending, stream.getvalue()


async def test_the_value_is_in_the_run_and_nowhere_dispatch_writes(tmp_path: Path) -> None:
    proc = processor(tmp_path, {"disk": SecretProfile(file=private_file(tmp_path))})
    script = 'printf %s "$OPENAI_API_KEY" | sha256sum; echo "$PLAIN $OPENAI_API_KEY"; exit 1'
    ending, logged = await run(proc, secret_job(script))
    assert ending.action == "retry" and ending.record is not None
    output = Path(ending.record.output or "").read_text()
    assert hashlib.sha256(VALUE.encode()).hexdigest() in output
    assert "visible ***" in output
    assert VALUE not in everything_kept(ending, logged)
    assert "secrets_resolved" in logged


async def test_a_resolver_failure_is_an_infra_retry_with_its_reason(tmp_path: Path) -> None:
    failing = tmp_path / "failing"
    failing.write_text(f"#!/bin/sh\necho {VALUE} >&2\nexit 4\n")
    failing.chmod(0o755)
    proc = processor(tmp_path, {"vault": SecretProfile(command=[str(failing), "{name}"])})
    ending, logged = await run(proc, secret_job("echo ran", "vault/openai"))
    assert ending.action == "retry" and ending.record is not None
    assert not ending.record.started_at  # it never ran
    detail = msgspec.json.decode(ending.payload, type=DeferRecord).detail
    assert detail == f"{SECRET_UNRESOLVED}: vault/openai: failing exited 4"
    assert VALUE not in everything_kept(ending, logged)


async def test_a_cancel_during_a_slow_resolver_ends_the_job_cancelled_at_once(
    tmp_path: Path,
) -> None:
    slow = tmp_path / "slow"
    marker = tmp_path / "resolving"
    slow.write_text(f"#!/bin/sh\ntouch {marker}\nsleep 60\n")
    slow.chmod(0o755)
    profile = SecretProfile(command=[str(slow)], timeout_ms=120_000)
    proc = processor(tmp_path, {"vault": profile})
    signal = AbortSignal()
    task = asyncio.ensure_future(run(proc, secret_job("echo ran", "vault/x"), signal))

    async def resolving() -> bool:
        return marker.exists()

    await eventually(resolving, 10)
    signal.abort(OPERATOR_CANCEL)
    ending, _ = await asyncio.wait_for(task, 2)
    result = msgspec.json.decode(ending.payload, type=Result)
    assert (ending.action, result.state, result.outcome) == ("finish", "cancelled", CANCELLED)
