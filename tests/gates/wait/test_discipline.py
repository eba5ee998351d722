"""The hold discipline, over any sequence of verdicts (hypothesis): after every look no check
slot and no fleet check lease is held, and once the wait ends no identity claim is left."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatch.gates.wait.profiles import Verdict
from dispatch.queue.connect import redis_client
from tests.support.waits import assert_discipline, make_rig

verdicts = st.lists(st.sampled_from(["go", "hold", "never", "fault", "aborted"]), max_size=14)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(verdicts, min_size=1, max_size=3), fleet=st.sampled_from([None, 1, 3]))
def test_no_hold_outlives_a_look(redis_url: str, runs: list[list[Verdict]], fleet: int | None):
    async def scenario() -> None:
        redis = redis_client(redis_url, socket_timeout=30)
        prefix = f"t{uuid.uuid4().hex[:10]}"
        try:
            async with AsyncExitStack() as stack:
                rig = await make_rig(stack, redis, prefix, [], wait_fleet_checks=fleet)
                for n, run in enumerate(runs):
                    await assert_discipline(rig, run or ["go"], f"j{n}")
        finally:
            await redis.aclose()

    asyncio.run(scenario())
