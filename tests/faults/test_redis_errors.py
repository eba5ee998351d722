"""Redis error replies, timeouts and lost connections are faults: they never fail a job, never
spend its attempt, and never end the daemon. Real redis-server behind `RedisProxy`.

Leases first (the renewer, fail-open only when Redis is away, a grant whose reply was lost),
then the gates through the processor, then a real daemon process.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import msgspec
import pytest

from dispatch.clock import SystemClock
from dispatch.config.settings import Settings
from dispatch.config.watcher import ConfigFiles
from dispatch.daemon.assembly import gated_processor
from dispatch.daemon.processor import Processor
from dispatch.errors import RedisUnavailable, RedisUnreachable
from dispatch.fleet.leases import FleetLeases, LeaseSettings, holders
from dispatch.gates.base import REDIS_FAULT_DELAY_MS
from dispatch.gates.scope import ScopeGate
from dispatch.model import DeferRecord, Job, encode_job
from dispatch.queue.keys import lease_keys
from dispatch.queue.scripts import script
from dispatch.queue.transitions import Claim, Finish, NewJob, Queue
from dispatch.reasons import LEASE_LOST, REDIS_UNAVAILABLE
from dispatch.records.disk_log import encode
from dispatch.runners.base import AbortSignal
from dispatch.runners.process import ProcessRunner
from tests.support.daemons import cli_env, daemon, dispatch, dispatch_json, wait_state
from tests.support.polling import eventually, eventually_sync
from tests.support.redis_errors import ERROR_REPLIES, answering_errors

pytestmark = pytest.mark.anyio


def quick(prefix: str, **kw) -> LeaseSettings:
    return LeaseSettings(
        prefix=prefix,
        **{"ttl_s": 2.0, "renew_every_s": 0.1, "retry_s": 0.05, "timeout_s": 0.5, **kw},
    )


async def expiry(redis, name: str, prefix: str, holder: str) -> int:
    return (await holders(redis, lease_keys(name, prefix))).get(holder, 0)


# -- leases -----------------------------------------------------------------------------------


async def test_the_renewer_goes_on_through_error_replies(redis, proxied, proxy, prefix, events):
    async with FleetLeases(proxied, quick(prefix), host="h1") as leases:
        lease = await leases.acquire("gpu", slots=1)
        assert lease is not None and not lease.degraded
        with proxy.fault("error", ERROR_REPLIES["READONLY"]):
            await eventually(lambda: logged(events, "lease_degraded"))
            before = await expiry(redis, "gpu", prefix, lease.holder)
        # shorter than the TTL: the lease is kept, and renewals resume
        await eventually(lambda: expiry_after(redis, prefix, lease.holder, before))
        assert not lease.lost.is_set()
        with proxy.fault("error", ERROR_REPLIES["READONLY"]):  # longer than the TTL: lost
            with anyio.fail_after(10):
                await lease.lost.wait()
        # the renewer ended alone: this body (the daemon's, in assembly) was not cancelled
        await leases.release(lease)  # as the processor does once the run has stopped
        again = await leases.acquire("gpu", slots=1)
        assert again is not None and not again.degraded
        await leases.release(again)
    lost = [e["reason"] for e in events("lease_lost")]
    assert lost == ["redis_unavailable"]


async def logged(events, name: str) -> list:
    return events(name)


async def expiry_after(redis, prefix: str, holder: str, before: int) -> bool:
    return await expiry(redis, "gpu", prefix, holder) > before


async def test_an_unreachable_redis_grants_a_degraded_lease(proxied, proxy, prefix) -> None:
    async with FleetLeases(proxied, quick(prefix), host="h1") as leases:
        with proxy.fault("refuse"):
            lease = await leases.acquire("gpu", slots=1)
        assert lease is not None and lease.degraded and lease.fence is None
        await leases.release(lease)


@pytest.mark.parametrize("mode", ["blackhole", *ERROR_REPLIES])
async def test_a_slow_or_erring_redis_grants_nothing(redis, proxied, proxy, prefix, mode):
    async with FleetLeases(proxied, quick(prefix), host="h1") as leases:
        with proxy.fault(
            "blackhole" if mode == "blackhole" else "error", ERROR_REPLIES.get(mode, b"")
        ):
            if mode != "blackhole":
                await answering_errors(proxied)
            with pytest.raises(RedisUnavailable) as raised:
                await leases.acquire("gpu", slots=1)
        assert not isinstance(raised.value, RedisUnreachable)
        assert leases.held() == []
    assert await holders(redis, lease_keys("gpu", prefix)) == {}


async def test_a_degraded_grant_that_reached_redis_is_renewed(redis, proxied, proxy, prefix):
    async with FleetLeases(proxied, quick(prefix, ttl_s=1.0), host="h1") as leases:
        with proxy.fault("refuse"):
            lease = await leases.acquire("gpu", slots=1)
            assert lease is not None and lease.degraded
            # as if the acquire had reached Redis and only its reply was lost
            lk = lease.keys
            granted = await script("lease_acquire")(
                redis, [lk.holders, lk.fence], [lease.holder, 1, 1000]
            )
            assert granted[0] == 1
            first = await expiry(redis, "gpu", prefix, lease.holder)

        async def confirmed() -> bool:
            return lease.backed is True

        await eventually(confirmed, timeout=5)
        assert not lease.degraded
        # kept past the TTL of the lost grant by the renewer, not left to lapse
        await eventually(lambda: expiry_after(redis, prefix, lease.holder, first + 1000))
        assert await leases.release(lease)


async def test_a_degraded_grant_redis_never_saw_is_taken_again(redis, proxied, proxy, prefix):
    async with FleetLeases(proxied, quick(prefix), host="h1") as leases:
        with proxy.fault("refuse"):
            lease = await leases.acquire("gpu", slots=1)
        assert lease is not None and lease.degraded

        async def answered() -> bool:
            return lease.backed is True

        await eventually(answered, timeout=5)
        # Redis now counts it, so no other host is let in beside the run; its start stays unchecked
        assert lease.failed_open and not lease.lost.is_set()
        assert set(await holders(redis, lease_keys("gpu", prefix))) == {lease.holder}
        assert await leases.release(lease)
        assert await holders(redis, lease_keys("gpu", prefix)) == {}


# -- gates, through the processor -------------------------------------------------------------

REPO_LEASE = "scope:repo:acme/web"


def settings_for(tmp_path: Path, prefix: str, url: str) -> Settings:
    """A host whose repo acme/web runs one job at a time fleet-wide: the scope gate takes a
    fleet lease, so it talks to Redis."""
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    limits = {"version": 1, "limits": [{"scope": "acme/web", "concurrent": 1}]}
    (config / "scoped-limits.json").write_text(json.dumps(limits))
    return Settings(
        redis_url=url,
        embedded=False,
        prefix=prefix,
        host="h1",
        state_dir=tmp_path / "state",
        config_dir=config,
        runner="process",
    )


@contextlib.asynccontextmanager
async def real_gates(settings: Settings, client) -> AsyncIterator[Processor]:
    """The daemon's own processor and gate pipeline (assembly), on `client`."""
    files = ConfigFiles(settings.config_dir, SystemClock())
    async with gated_processor(settings, client, ProcessRunner(), files) as processor:
        yield processor


async def claimed(redis, prefix: str, job: Job) -> tuple[Queue, Claim]:
    queue = Queue(redis, job.queue, prefix)
    await queue.enqueue([NewJob(job.id, encode_job(job))])
    (claim,) = (await queue.claim(1, "h1", 30_000)).claims
    return queue, claim


def web_job(job_id: str) -> Job:
    return Job(id=job_id, kind="forge", repo="acme/web", command=["true"])


def repo_slots(processor: Processor) -> list[str]:
    scope = next(g for g in processor.gates if isinstance(g, ScopeGate))
    return scope.slots.owners("repo:acme/web")


async def finish(queue: Queue, claim: Claim, ending) -> list[bool]:
    """What the worker's flush sends once Redis answers again."""
    item = Finish(ending.action, claim.id, claim.token, ending.payload, ending.delay_ms)
    return await queue.finish([item])


@pytest.mark.parametrize("reply", ERROR_REPLIES)
async def test_an_error_reply_in_a_gate_defers_the_job_with_nothing_held(
    redis, proxied, proxy, prefix, tmp_path, events, reply
) -> None:
    queue, claim = await claimed(redis, prefix, web_job("j1"))
    async with real_gates(settings_for(tmp_path, prefix, proxy.url), proxied) as processor:
        with proxy.fault("error", ERROR_REPLIES[reply]):
            await answering_errors(proxied)
            ending = await processor.process(claim, AbortSignal())
        assert repo_slots(processor) == []
    assert (ending.action, ending.delay_ms, ending.record) == ("defer", REDIS_FAULT_DELAY_MS, None)
    deferred = msgspec.json.decode(ending.payload, type=DeferRecord)
    assert deferred.reason == REDIS_UNAVAILABLE and deferred.detail.startswith("scope gate: ")
    assert [e["gate"] for e in events("gate_redis_fault")] == ["scope"]
    assert await finish(queue, claim, ending) == [True]
    assert await redis.zscore(queue.keys.delayed, "j1") is not None
    assert await redis.hget(queue.keys.attempts, "j1") is None  # no attempt spent
    assert await holders(redis, lease_keys(REPO_LEASE, prefix)) == {}


async def test_a_slow_redis_in_a_gate_defers_too(redis, proxied, proxy, prefix, tmp_path):
    _, claim = await claimed(redis, prefix, web_job("j1"))
    async with real_gates(settings_for(tmp_path, prefix, proxy.url), proxied) as processor:
        with proxy.fault("blackhole"):
            ending = await processor.process(claim, AbortSignal())
        assert repo_slots(processor) == []
    deferred = msgspec.json.decode(ending.payload, type=DeferRecord)
    assert (ending.action, deferred.reason) == ("defer", REDIS_UNAVAILABLE)


async def test_a_settled_record_that_cannot_be_read_defers(redis, proxied, proxy, prefix, tmp_path):
    _, claim = await claimed(redis, prefix, web_job("j1"))
    stalled = Claim(claim.queue, claim.id, claim.token, claim.attempt, 1, 0, claim.data)
    async with real_gates(settings_for(tmp_path, prefix, proxy.url), proxied) as processor:
        with proxy.fault("error", ERROR_REPLIES["LOADING"]):
            await answering_errors(proxied)
            ending = await processor.process(stalled, AbortSignal())
    deferred = msgspec.json.decode(ending.payload, type=DeferRecord)
    assert (deferred.reason, deferred.detail) == (
        REDIS_UNAVAILABLE,
        "settled gate: BusyLoadingError",
    )


async def test_faults_in_a_row_back_off_and_a_clean_pickup_resets(
    redis, proxied, proxy, prefix, tmp_path
) -> None:
    async with real_gates(settings_for(tmp_path, prefix, proxy.url), proxied) as processor:
        delays = []
        for n in range(5):
            _, claim = await claimed(redis, prefix, web_job(f"j{n}"))
            with proxy.fault("error", ERROR_REPLIES["OOM"]):
                await answering_errors(proxied)
                delays.append((await processor.process(claim, AbortSignal())).delay_ms)
        assert delays == [2_000, 4_000, 8_000, 16_000, 16_000]
        _, claim = await claimed(redis, prefix, web_job("ok"))
        assert (await processor.process(claim, AbortSignal())).action == "finish"
        _, claim = await claimed(redis, prefix, web_job("j9"))
        with proxy.fault("error", ERROR_REPLIES["OOM"]):
            await answering_errors(proxied)
            assert (await processor.process(claim, AbortSignal())).delay_ms == 2_000


async def test_a_run_on_a_degraded_lease_says_so_in_its_record_and_why(
    redis_url, redis, proxied, proxy, prefix, tmp_path, events
) -> None:
    queue, claim = await claimed(redis, prefix, web_job("j1"))
    async with real_gates(settings_for(tmp_path, prefix, proxy.url), proxied) as processor:
        with proxy.fault("refuse"):  # Redis is away: the repo's fleet lease fails open
            ending = await processor.process(claim, AbortSignal())
    record = ending.record
    assert ending.action == "finish" and record is not None
    assert (record.outcome, record.degraded) == ("completed", (REPO_LEASE,))
    assert [e["lease"] for e in events("lease_granted_degraded")] == [REPO_LEASE]
    # the worker's finish mirrors the record; `dispatch why` tells the operator
    item = Finish("finish", claim.id, claim.token, ending.payload, 0, record.run_id, encode(record))
    assert await queue.finish([item]) == [True]
    env = cli_env(redis_url, prefix, tmp_path / "cli")
    told = await anyio.to_thread.run_sync(dispatch, env, "why", "j1")
    assert f"on fleet lease {REPO_LEASE} granted without it" in told.stdout
    story = await anyio.to_thread.run_sync(dispatch_json, env, "why", "j1")
    assert story["degraded"] == [{"attempt": 1, "host": "h1", "leases": [REPO_LEASE]}]


# -- NOSCRIPT: a server that lost its scripts (restart, failover, SCRIPT FLUSH) -------------


async def test_a_script_flush_between_calls_is_survived(redis, prefix) -> None:
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob(f"j{n}", encode_job(web_job(f"j{n}"))) for n in range(2)])
    await redis.script_flush()
    (first,) = (await queue.claim(1, "h1", 30_000)).claims  # one EVALSHA: reloads the script
    await redis.script_flush()
    done = Finish("finish", first.id, first.token, b'{"state":"completed","outcome":"completed"}')
    oks, batch = await queue.finish_and_claim([done], 1, "h1", 30_000)  # a pipeline of two
    assert oks == [True] and [c.id for c in batch.claims] == ["j1"]


async def test_a_lease_outlives_a_script_flush(redis, prefix) -> None:
    async with FleetLeases(redis, quick(prefix), host="h1") as leases:
        lease = await leases.acquire("gpu", slots=1)
        assert lease is not None
        await redis.script_flush()
        assert await leases.renew(lease)
        await redis.script_flush()
        assert await leases.release(lease)


async def test_the_gates_outlive_a_script_flush(redis, prefix, tmp_path) -> None:
    _, claim = await claimed(redis, prefix, web_job("j1"))
    async with real_gates(settings_for(tmp_path, prefix, "unused"), redis) as processor:
        await redis.script_flush()
        ending = await processor.process(claim, AbortSignal())
    assert ending.action == "finish" and ending.record is not None
    assert ending.record.outcome == "completed" and ending.record.degraded == ()


# -- a real daemon ----------------------------------------------------------------------------


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def local_reasons(state: Path) -> list[str]:
    log = state / "runs.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line).get("reason", "") for line in lines]


@pytest.mark.slow
def test_a_daemon_outlives_readonly_past_its_lease_ttl_and_hands_the_job_back(
    redis_url: str, prefix: str, tmp_path: Path, proxy
) -> None:
    state = tmp_path / "state"
    settings = settings_for(tmp_path, prefix, proxy.url)  # writes the repo's limit
    config = {"DISPATCH_HOST": "ro-host", "DISPATCH_CONFIG_DIR": str(settings.config_dir)}
    faulty = cli_env(proxy.url, prefix, state, DISPATCH_LEASE_TTL="2s", **config)
    direct = cli_env(redis_url, prefix, state, **config)
    pid_file, ran = tmp_path / "pid", tmp_path / "ran"
    script = f"[ -e {ran} ] && exit 0; touch {ran}; echo $$ > {pid_file}; exec sleep 60"
    with daemon(faulty) as proc:
        submitted = dispatch(direct, "submit", "--repo", "acme/web", "--", "sh", "-c", script)
        job_id = submitted.stdout.strip()
        pid = int(eventually_sync(lambda: pid_file.exists() and pid_file.read_text().strip()))
        with proxy.fault("error", ERROR_REPLIES["READONLY"]):
            # the lease cannot be renewed past its TTL: the run is stopped, lease-lost ...
            eventually_sync(lambda: not alive(pid), timeout=20)
            # ... its record is written here, and its ending waits for Redis in the worker
            eventually_sync(lambda: LEASE_LOST in local_reasons(state), timeout=20)
            assert proc.poll() is None
        assert wait_state(direct, job_id, "completed", "failed", timeout=30) == "completed"
        assert proc.poll() is None
    assert local_reasons(state) == [LEASE_LOST, ""]
    assert dispatch_json(direct, "why", job_id)["attempt"] == 1  # the fault spent none
