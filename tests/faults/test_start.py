"""A worker whose Redis answers errors when it starts waits and retries; it starts serving
once Redis answers, instead of ending the daemon."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.asyncio import Redis

from dispatch.config.settings import Settings
from dispatch.daemon.processor import Processor, ProcessorSettings
from dispatch.daemon.worker import Timing, Worker
from dispatch.queue import keys
from dispatch.runners.process import ProcessRunner
from tests.support.polling import eventually
from tests.support.redis_proxy import RedisProxy

pytestmark = pytest.mark.anyio


async def test_a_redis_fault_at_start_is_waited_out(
    redis: Redis, proxied: Redis, proxy: RedisProxy, prefix: str, tmp_path: Path
) -> None:
    settings = Settings(
        redis_url=proxy.url, embedded=False, prefix=prefix, host="h1", state_dir=tmp_path
    )
    processor = Processor(ProcessorSettings(host="h1", output_dir=tmp_path), ProcessRunner())
    worker = Worker(settings, proxied, processor, timing=Timing(heartbeat_s=0.5, block_s=0.5))
    stop = asyncio.Event()
    alive = keys.host_alive("h1", prefix)
    with proxy.fault("error"):  # READONLY, as in a failover
        task = asyncio.create_task(worker.run(stop))
        await asyncio.sleep(1.0)  # a few retries' worth: it must still be waiting, not ended
        assert not task.done() and not await redis.exists(alive)
    await eventually(lambda: redis.exists(alive), 20)
    stop.set()
    await asyncio.wait_for(task, 30)
