"""`dispatch logs ID [--attempt N] [-f]`: a run's captured output, from any machine.

Which run: the attempt asked for, else the one running now, else the latest recorded. On the
host that ran it the whole file is read (the run record names it); elsewhere the tail the
running host kept in Redis (dispatch/records/tail.py), which holds the newest
`DISPATCH_LOG_TAIL` bytes. `-f` follows: it waits for a job not started yet, prints the run's
output as it comes (saying so when the cap trimmed some before it was read), goes on to the
next attempt when the job is retried, and exits with the job's exit code once it has ended for
good (1 when it ended with none: refused, cancelled, lost). Every read is bounded; a follower
asks the job's state once a second.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from dispatch.client import Client, JobView
from dispatch.config.settings import Settings
from dispatch.errors import NotFound
from dispatch.model import RunRecord
from dispatch.queue import keys
from dispatch.records.tail import fence_of

BLOCK_MS = 1000  # one XREAD's wait: also how often a follower looks at the job
ENDED = ("completed", "failed", "cancelled")
POLL_S = 0.1  # between looks at a job whose run ended and whose finish has not landed yet


@dataclass(frozen=True)
class Run:
    queue: str
    attempt: int
    token: str
    record: RunRecord | None = None

    def key(self, prefix: str, job_id: str) -> str:
        return keys.queue_keys(self.queue, prefix).tail(job_id, self.attempt, fence_of(self.token))


async def show(client: Client, settings: Settings, job_id: str, attempt: int | None) -> int:
    view = await _job(client, job_id)
    run = await run_of(client, view, attempt)
    if run is None:
        raise NotFound(f"job {job_id} has {'no such attempt' if attempt else 'not run yet'}")
    record = run.record
    if record and record.host == settings.host:
        whole = await asyncio.to_thread(_local_file, record)
        if whole is not None:
            _write(whole)
            return 0
    chunks: Any = await client.redis.xrange(run.key(client.prefix, job_id))
    for _, fields in chunks:
        _write(fields.get(b"d", b""))
    if not chunks and record is not None and record.host != settings.host:
        print(
            f"dispatch: no output of attempt {run.attempt} in Redis (the run printed nothing,"
            f" or its tail expired); the whole file stays on {record.host}",
            file=sys.stderr,
        )
    return 0


async def follow(client: Client, job_id: str, attempt: int | None) -> int:
    view = await _job(client, job_id)
    run = await run_of(client, view, attempt)
    while run is None:  # not started yet: wait for its first run
        await asyncio.sleep(BLOCK_MS / 1000)
        view = await _job(client, job_id)
        if view.state in ENDED:
            return _exit_code(view, None)
        run = await run_of(client, view, attempt)
    while True:
        ended = await _stream(client, job_id, run)
        while True:  # the run is over: until its finish lands, or the next run begins
            view = await _job(client, job_id)
            if view.state in ENDED:
                return _exit_code(view, ended)
            if attempt is not None and ended is not None:
                return ended  # that attempt is over; the job goes on
            nxt = await run_of(client, view, attempt)
            if nxt is not None and nxt.token != run.token:
                print(f"dispatch: attempt {nxt.attempt} of {job_id}", file=sys.stderr)
                run = nxt
                break
            await asyncio.sleep(POLL_S)  # never the same run's output twice


async def _stream(client: Client, job_id: str, run: Run) -> int | None:
    """Print the run's output until its end mark (its exit code, or -1 for none) or until
    the job no longer runs it; None then."""
    key, last = run.key(client.prefix, job_id), "0-0"
    while True:
        found: Any = await client.redis.xread({key: last}, count=100, block=BLOCK_MS)
        for _, entries in found:
            for entry_id, fields in entries:
                _gap(last, entry_id)
                last = entry_id
                if b"end" in fields:
                    code = fields[b"end"]
                    return int(code) if code else -1
                _write(fields.get(b"d", b""))
        if not found:
            view = await _job(client, job_id)
            if view.state != "active" or view.token != run.token:
                return None


def _gap(last: bytes | str, entry_id: bytes | str) -> None:
    """The writer numbers its entries 1, 2, 3...: a jump means the host printed faster than
    this follower read, and the cap trimmed what it had not read yet."""
    skipped = _seq(entry_id) - _seq(last) - 1
    if skipped > 0:
        print(
            f"dispatch: {skipped} chunk(s) of output skipped: Redis keeps only the newest"
            " DISPATCH_LOG_TAIL bytes (the whole file stays on the host)",
            file=sys.stderr,
        )


def _seq(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[2] or 0)


def _exit_code(view: JobView, ended: int | None) -> int:
    result = view.result
    if result is not None and result.exit_code is not None:
        return result.exit_code
    if view.state == "completed":
        return 0
    return ended if ended is not None and ended >= 0 else 1


async def _job(client: Client, job_id: str) -> JobView:
    view = await client.get(job_id)
    if view is None:
        raise NotFound(f"no job {job_id}")
    return view


async def run_of(client: Client, view: JobView, attempt: int | None) -> Run | None:
    running = view.state == "active" and view.token
    if running and attempt in (None, view.attempt):
        return Run(view.queue, view.attempt, str(view.token))
    wanted = attempt or view.attempt
    if wanted < 1:
        return None
    raw = await client.redis.hget(
        keys.queue_keys(view.queue, client.prefix).runs, f"{view.id}#{wanted}"
    )
    if not raw:
        return None
    try:
        record = msgspec.json.decode(raw, type=RunRecord)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return Run(view.queue, wanted, record.claim, record) if record.claim else None


def _local_file(record: RunRecord) -> bytes | None:
    """The whole output file, on the host that ran the run (if it is still there)."""
    try:
        return Path(record.output).read_bytes() if record.output else None
    except OSError:  # pruned, or never written: the tail in Redis is what is left
        return None


def _write(data: bytes) -> None:
    if data:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
