"""A held job's wait state in Redis: what `dispatch why` tells of a job that waits for its
conditions (since when, how many checks, the last answer and its first line, the next check).

One JSON string per job (`keys.wait_state`), written whole by the wait gate after each look,
read by `dispatch why`. It is removed when the job ends: by the daemon once the job's finish
has landed (`daemon/flights.py`), by `dispatch cancel` for a job it cancels. Its TTL is only the
backstop for an ending neither sees (a sweep failing a stalled job): a day past the longest
any wait can last.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from redis.asyncio import Redis

from dispatch.config.settings import Settings
from dispatch.queue.faults import redis_call
from dispatch.queue.keys import DEFAULT_PREFIX, wait_state

BACKSTOP_MS = 86_400_000


class WaitState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    since_ms: int = 0  # when the job first held (0: it never has)
    checks: int = 0
    faults: int = 0  # checks in a row that could not tell
    throttles: int = 0  # denied check slots in a row
    answer: str = ""  # the last check's answer: go | not yet | never | could not tell
    line: str = ""  # the first line of the last check's output
    profile: str = ""  # the profile that decided the last check
    next_ms: int = 0  # the next look
    gives_up_ms: int = 0  # when the max wait ends
    after_ms: int = 0  # the `after` instant, if any
    target: str = ""  # as records name it (a folder's basename, never its path)
    label: str = ""  # the conditions in a few words
    identity: str = ""
    cleared_ms: int = 0  # when every condition cleared (the job then goes on)


def wait_state_ttl_ms(s: Settings) -> int:
    """The backstop: the longest `after`, then the longest hold, then a day."""
    return s.wait_after_max_ms + s.wait_max_ms + BACKSTOP_MS


_decoder = msgspec.json.Decoder(WaitState)
_encoder = msgspec.json.Encoder()


class WaitStates:
    def __init__(self, redis: Redis, prefix: str = DEFAULT_PREFIX, ttl_ms: int = 0) -> None:
        """`ttl_ms`: how long a state outlives its last write at most (the backstop)."""
        self.redis = redis
        self.prefix = prefix
        self.ttl_ms = ttl_ms or 32 * BACKSTOP_MS

    async def get(self, queue: str, job_id: str) -> WaitState | None:
        with redis_call("wait state get"):
            raw = await self.redis.get(wait_state(queue, job_id, self.prefix))
        return _decode(raw)

    async def put(self, queue: str, job_id: str, state: WaitState) -> None:
        key = wait_state(queue, job_id, self.prefix)
        with redis_call("wait state put"):
            await self.redis.set(key, _encoder.encode(state), px=self.ttl_ms)

    async def forget(self, queue: str, job_ids: Sequence[str]) -> None:
        if job_ids:
            with redis_call("wait state forget"):
                await self.redis.delete(*(wait_state(queue, j, self.prefix) for j in job_ids))


def _decode(raw: bytes | str | None) -> WaitState | None:
    """None for no state, and for one this release cannot read (it is only an account)."""
    if raw is None:
        return None
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError:
        return None
