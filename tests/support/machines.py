"""The base of the hypothesis state machines that drive the queue scripts on a real Redis: an
event loop of its own (a machine's rules are plain methods), a key prefix per example, and a
teardown that leaves nothing behind."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import Any

from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test
from redis.asyncio import Redis

from dispatch.queue.connect import redis_client
from dispatch.queue.keys import QueueKeys

STATES = ("wait", "delayed", "active", "done")


class RedisMachine(RuleBasedStateMachine):
    redis_url = ""  # set by the test on a subclass
    prefix_stem = "sm"

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.prefix = f"{self.prefix_stem}{uuid.uuid4().hex[:10]}"
        self.redis = self.run(self._connect())

    async def _connect(self) -> Redis:
        return redis_client(self.redis_url, socket_timeout=30)  # a cluster's too

    def run(self, coro: Awaitable[Any]) -> Any:  # what Redis answers: the rules decode it
        return self.loop.run_until_complete(coro)

    async def read_queue(self, k: QueueKeys) -> dict[str, Any]:
        """The queue as Redis holds it: each state's ids (wait in claim order), the job ids
        with a document (`data`), the locks (id -> token) and whether it is paused."""
        async with self.redis.pipeline(transaction=False) as p:
            p.lrange(k.wait, 0, -1)
            p.zrange(k.delayed, 0, -1)
            p.zrange(k.active, 0, -1)
            p.zrange(k.done, 0, -1)
            p.hkeys(k.data)
            p.hgetall(k.lock)
            p.exists(k.paused)
            *groups, lock, paused = await p.execute()
        names = [[x.decode() for x in group] for group in groups]
        return {
            **dict(zip([*STATES, "data"], names, strict=True)),
            "lock": {key.decode(): value.decode() for key, value in lock.items()},
            "paused": bool(paused),
        }

    def teardown(self) -> None:
        try:
            keys = self.run(self.redis.keys(f"*{self.prefix}*"))
            if keys:
                self.run(self.redis.delete(*keys))
            self.run(self.redis.aclose())
        finally:
            self.loop.close()


def run_on(machine: type[RedisMachine], redis_url: str, examples: int, steps: int) -> None:
    """Run the machine against `redis_url` (on a subclass: the class itself stays clean)."""
    bound = type(machine.__name__, (machine,), {"redis_url": redis_url})
    run_state_machine_as_test(
        bound, settings=settings(max_examples=examples, stateful_step_count=steps, deadline=None)
    )
