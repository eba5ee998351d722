"""A run's output tail in Redis, so `dispatch logs` works from any machine and `-f` follows.

The running host copies what its output file takes (masked already: dispatch/runners/output.py)
into one STREAM per run (`QueueKeys.tail`: job, attempt and the claim's fence). Its only
writer gives the entries their ids (`0-1`, `0-2`, ...), so each flush is one pipeline with no
reply to wait for before the next: XADD the chunks, XTRIM MINID to the newest `cap` bytes,
PEXPIRE the key to `ttl`. Output is sent at most every `FLUSH_S` and in entries of at most
`CHUNK` bytes. A run that prints nothing writes nothing; one that printed something ends with
an entry `end` holding its exit code, so a follower stops at once.

The tail is a convenience, like the file: a Redis fault loses that flush (logged once per run,
`log_tail_failed`), never the run, and the writer gives up after `MAX_FAULTS` in a row. Memory
is bounded by `cap` per run (`DISPATCH_LOG_TAIL`) and the key's TTL (`DISPATCH_LOG_TAIL_TTL`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from redis.asyncio import Redis
from redis.exceptions import RedisError
from redis.typing import EncodableT, FieldT

from dispatch.log import event
from dispatch.queue.keys import queue_keys

FLUSH_S = 0.2
CHUNK = 8 * 1024
MAX_FAULTS = 3
CALL_S = 2.0  # one flush's bound
Fields = dict[FieldT, EncodableT]


class RunTail:
    def __init__(self, redis: Redis, key: str, job: str, cap: int, ttl_s: float) -> None:
        self.redis = redis
        self.key = key
        self.job = job
        self.cap = cap
        self.ttl_ms = int(ttl_s * 1000)
        self._buffer = bytearray()
        self._kept: deque[tuple[int, int]] = deque()  # (seq, size) of the entries kept
        self._kept_bytes = 0
        self._seq = 0
        self._faults = 0
        self._sender: asyncio.Task[None] | None = None
        self._flushing = False
        self._closing = False

    def feed(self, data: bytes) -> None:
        """Called with each piece the output file took; never blocks, never raises."""
        if not data or self._faults >= MAX_FAULTS or self._closing:
            return
        self._buffer += data
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._send())

    def close_unfed(self) -> bool:
        """Close at no cost a tail nothing was fed to; False when something was (then `close`):
        most runs of a busy host print nothing, and a coroutine each cost a no-op run 1 us."""
        if self._sender is not None or self._buffer:
            return False
        self._closing = True
        return True

    async def close(self, exit_code: int | None) -> None:
        """Send what is left and the end mark (only if anything was sent), within CALL_S."""
        self._closing = True
        sender = self._sender
        if sender is not None:
            if not self._flushing:  # asleep: its buffer goes with the end mark instead
                sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        if self._seq or self._buffer:
            await self._flush({"end": "" if exit_code is None else str(exit_code)})

    async def _send(self) -> None:
        """One sender at a time, so ids reach Redis in order; cancelled only while asleep."""
        try:
            while self._buffer and not self._closing:
                await asyncio.sleep(FLUSH_S)  # what a run prints in this while goes in one flush
                self._flushing = True
                try:
                    await self._flush()
                finally:
                    self._flushing = False
        finally:
            self._sender = None

    async def _flush(self, last: dict[str, str] | None = None) -> None:
        if self._faults >= MAX_FAULTS:
            return
        entries = self._entries(last)
        try:
            async with asyncio.timeout(CALL_S):
                async with self.redis.pipeline(transaction=False) as p:
                    for seq, fields in entries:
                        p.xadd(self.key, fields, id=f"0-{seq}")
                    if self._kept:
                        p.xtrim(self.key, minid=f"0-{self._kept[0][0]}", approximate=False)
                    p.pexpire(self.key, self.ttl_ms)
                    await p.execute()
            self._faults = 0
        except (RedisError, OSError, TimeoutError) as exc:
            self._faults += 1
            if self._faults == 1:
                event("log_tail_failed", job=self.job, error=f"{type(exc).__name__}: {exc}")

    def _entries(self, last: dict[str, str] | None) -> list[tuple[int, Fields]]:
        data, self._buffer = bytes(self._buffer), bytearray()
        out: list[tuple[int, Fields]] = []
        for at in range(0, len(data), CHUNK):
            piece = data[at : at + CHUNK]
            self._seq += 1
            out.append((self._seq, {"d": piece}))
            self._keep(self._seq, len(piece))
        if last is not None:
            self._seq += 1
            end: Fields = {}
            end.update(last)
            out.append((self._seq, end))
        return out

    def _keep(self, seq: int, size: int) -> None:
        self._kept.append((seq, size))
        self._kept_bytes += size
        while self._kept_bytes > self.cap and len(self._kept) > 1:
            _, gone = self._kept.popleft()
            self._kept_bytes -= gone


class Tails:
    """Opens each run's tail (none when `DISPATCH_LOG_TAIL` is 0)."""

    def __init__(self, redis: Redis, prefix: str, cap: int, ttl_s: float) -> None:
        self.redis = redis
        self.prefix = prefix
        self.cap = cap
        self.ttl_s = ttl_s

    def open(self, queue: str, job_id: str, attempt: int, token: str) -> LazyTail | None:
        if self.cap <= 0:
            return None
        return LazyTail(self, queue, job_id, attempt, token)

    def key(self, queue: str, job_id: str, attempt: int, token: str) -> str:
        return queue_keys(queue, self.prefix).tail(job_id, attempt, fence_of(token))

    def writer(self, queue: str, job_id: str, attempt: int, token: str) -> RunTail:
        key = self.key(queue, job_id, attempt, token)
        return RunTail(self.redis, key, job_id, self.cap, self.ttl_s)


class LazyTail:
    """A run's tail whose writer (its key, buffer and state) is made at the first output:
    most runs of a busy host print nothing, and making it cost each of them about 1 us."""

    __slots__ = ("_closed", "_run", "_tails", "_writer")

    def __init__(self, tails: Tails, queue: str, job_id: str, attempt: int, token: str) -> None:
        self._tails = tails
        self._run = (queue, job_id, attempt, token)
        self._writer: RunTail | None = None
        self._closed = False

    @property
    def key(self) -> str:
        return self._tails.key(*self._run)

    def feed(self, data: bytes) -> None:
        if not data or self._closed:
            return
        if self._writer is None:
            self._writer = self._tails.writer(*self._run)
        self._writer.feed(data)

    def close_unfed(self) -> bool:
        """As `RunTail.close_unfed`: True (and nothing fed later is sent) when none was fed."""
        if self._writer is not None:
            return self._writer.close_unfed()
        self._closed = True
        return True

    async def close(self, exit_code: int | None) -> None:
        self._closed = True
        if self._writer is not None:
            await self._writer.close(exit_code)


def fence_of(token: str) -> str:
    """The number in a claim's token `<host>:<n>` (host names hold no colon)."""
    return token.rpartition(":")[2]
