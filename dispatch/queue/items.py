"""What a queue's transitions take and give: new jobs, claims, endings and their answers.

`MAX_ITEMS` is the scripts' own bound on jobs or claims per call; `Queue` splits longer lists
(see `dispatch/queue/transitions.py`). A claim and a finish are made per job on the hot path:
msgspec structs, which build in a tenth of a frozen dataclass's time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from dispatch.errors import Conflict, DispatchError, InvalidJob
from dispatch.model import Job, checked_document
from dispatch.queue.keys import QueueKeys
from dispatch.queue.lua_source import Arg, Code

DAY_MS = 24 * 3_600_000
MAX_DELAY_MS = 10 * 365 * DAY_MS  # the longest retry or deferral job_finish.lua takes
MAX_ITEMS = 1000  # jobs or claims per script call
# How a claim ends (lua/job_finish.lua): for good, or due again later, spending an attempt or not
Action = Literal["finish", "retry", "defer"]  # not a reason: the script's verbs


@dataclass(frozen=True, slots=True)
class Retention:
    keep_done: int = 10_000
    keep_done_ms: int = 7 * DAY_MS
    keep_runs: int = 50_000
    keep_runs_ms: int = 14 * DAY_MS


@dataclass(frozen=True, slots=True)
class NewJob:
    id: str
    data: bytes
    due_ms: int = 0
    delay_ms: int = 0
    dedup: str = ""
    dedup_window_ms: int = 0


class Claim(msgspec.Struct, frozen=True):
    queue: str
    id: str
    token: str
    attempt: int
    stalls: int
    queued_ms: int
    data: bytes


@dataclass(slots=True)
class ClaimBatch:
    now_ms: int
    next_due_ms: int  # 0 when nothing is delayed
    claims: list[Claim] = field(default_factory=list)


class Finish(msgspec.Struct, frozen=True):
    """One ending of a claim: `finish` (result payload), `retry` or `defer` (defer payload).

    `cancelled`, for a retry or defer, is the result it finishes with instead if an operator's
    cancel request stands for the job when the ending lands (job_finish decides, atomically)."""

    action: Action
    id: str
    token: str
    payload: bytes
    delay_ms: int = 0
    run_id: str = ""
    run: bytes = b""
    cancelled: bytes = b""


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: str
    created: bool  # False: a duplicate of the job `id` within its dedup window, or taken
    taken: bool = False  # the id already belongs to another job: nothing was written


class EnqueueIncomplete(DispatchError):
    """A split enqueue whose later call failed: `done` answers the jobs written (in order),
    `pending` the jobs not written; the failing call's error is the cause."""

    def __init__(self, message: str, done: list[Enqueued], pending: list[NewJob]) -> None:
        super().__init__(message)
        self.done = done
        self.pending = pending


def enqueue_call(k: QueueKeys, jobs: Sequence[NewJob]) -> tuple[list[str], list[Arg]]:
    """job_enqueue.lua's keys and arguments for `jobs` (at most `MAX_ITEMS`)."""
    args: list[Arg] = []
    for j in jobs:
        args += [j.id, j.data, j.due_ms, j.delay_ms, j.dedup, j.dedup_window_ms]
    return [k.data, k.queued, k.wait, k.delayed, k.dedup, k.dedup_exp, k.done, k.marker], args


def enqueued(out: Sequence[Any]) -> list[Enqueued]:
    """job_enqueue.lua's answer (code, id per job), already `checked`, one `Enqueued` each."""
    return [
        Enqueued(_text(job_id), int(code) == 1, int(code) == Code.CONFLICT)
        for code, job_id in zip(out[::2], out[1::2], strict=True)
    ]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def new_job(job: Job, due_ms: int, delay_ms: int, dedup_window_ms: int) -> NewJob:
    """`job` checked as a daemon would read it, with its instants checked too; InvalidJob if not."""
    raw = checked_document(job)
    for name, value in (("due", due_ms), ("delay", delay_ms), ("dedup window", dedup_window_ms)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidJob(f"{name} must be a whole number of milliseconds, 0 or more")
    return NewJob(job.id, raw, due_ms, delay_ms, job.dedup or "", dedup_window_ms)


def taken_refused(job: Job, done: Enqueued) -> Enqueued:
    """`done`, unless the job's id belongs to another job: then Conflict (nothing was written)."""
    if done.taken:
        raise Conflict(f"job id {job.id} is already taken")
    return done
