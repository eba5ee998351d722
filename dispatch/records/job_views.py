"""A job as the readers see it (`JobView`), and the plain reads behind `Client.get` and
`Client.list`: the commands to send (`list_commands`, `view_commands`) and what their replies
say (`listed`, `decoded_views`). No client here: `Client` sends them through redis-py, the
CLI's quick path (cli/quick.py) through a plain socket, and both decode the same replies
(a score as redis-py's float or as the server's bytes, a flag as a bool or an integer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from dispatch.errors import InvalidJob
from dispatch.model import DeferRecord, Result, decode_job, iso
from dispatch.queue import keys
from dispatch.reasons import lookup
from dispatch.records.unreadable import UNREADABLE, detail

Command = tuple[str | int, ...]
_defer = msgspec.json.Decoder(DeferRecord)
_result = msgspec.json.Decoder(Result)


@dataclass
class JobView:
    id: str
    queue: str
    state: str  # waiting | delayed | active | completed | failed | cancelled
    attempt: int = 0
    stalls: int = 0
    queued_at: str | None = None
    until: str | None = None  # when a delayed job is due
    owner: str | None = None  # host holding an active job's claim
    token: str | None = None
    defer: DeferRecord | None = None
    result: Result | None = None
    paused: str = ""  # a job that waits: "fleet" (dispatch pause) or "queue" (its own queue's)
    unreadable: str = ""  # state "unreadable": which of its fields did not decode, and why
    target: str = ""  # what it works on, when the listing read its document (`list(targets=)`)
    project: str = ""  # its project, read with the target

    @property
    def reason(self) -> str:
        if self.result is not None:
            return self.result.reason
        return self.defer.reason if self.defer and self.state == "delayed" else ""

    @property
    def sentence(self) -> str:
        """The reason in plain words: the refusing gate's own, else the catalogue's."""
        if self.result is not None and self.result.sentence:
            return self.result.sentence
        entry = lookup(self.reason)
        return entry.sentence if entry else ""

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "queue": self.queue,
            "state": self.state,
            "reason": self.reason,
            "sentence": self.sentence,
            "until": self.until,
            "attempt": self.attempt,
            "owner": self.owner,
            "queued_at": self.queued_at,
            "defer": msgspec.to_builtins(self.defer) if self.defer else None,
            "result": msgspec.to_builtins(self.result) if self.result else None,
            "paused": self.paused or None,
            "unreadable": self.unreadable or None,
            **({"target": self.target} if self.target else {}),
        }


CancelOutcome = Literal[
    "cancelled", "taken", "unowned", "finished", "unacknowledged", "killed", "kill-sent"
]


@dataclass(frozen=True)
class CancelAnswer:
    outcome: CancelOutcome
    host: str = ""  # taken: the owner; cancelled: the owner that ended it so, if one did


def list_commands(names: Sequence[str], prefix: str, limit: int) -> list[Command]:
    """Up to `limit` ids of each state group of each queue: four commands a queue."""
    commands: list[Command] = []
    for name in names:
        k = keys.queue_keys(name, prefix)
        commands += [
            ("ZRANGE", k.active, 0, limit - 1),
            ("LRANGE", k.wait, 0, limit - 1),
            ("ZRANGE", k.delayed, 0, limit - 1),
            ("ZREVRANGE", k.done, 0, limit - 1),
        ]
    return commands


def listed(names: Sequence[str], groups: Sequence[Any]) -> list[tuple[str, str]]:
    """(queue, id) of every id `list_commands` found, in its order."""
    return [
        (name, _text(job_id))
        for name, ids in zip(names, _chunks(list(groups), 4), strict=True)
        for group in ids
        for job_id in group
    ]


def view_commands(
    wanted: Sequence[tuple[str, str]], prefix: str, targets: bool = False
) -> list[Command]:
    """Each (queue, id)'s fields, then whether the fleet and each of those queues is paused;
    `targets` reads each document too, for what the job works on."""
    by_queue = {q: keys.queue_keys(q, prefix) for q in _queues(wanted)}
    commands: list[Command] = []
    for queue, job_id in wanted:
        k = by_queue[queue]
        commands += [("ZSCORE", key, job_id) for key in (k.delayed, k.active, k.done)]
        # whether it is known; the document only when what it works on is asked
        commands.append(("HGET", k.data, job_id) if targets else ("HEXISTS", k.data, job_id))
        for key in (k.defer, k.result, k.lock, k.attempts, k.stalls, k.queued):
            commands.append(("HGET", key, job_id))
    commands.append(("EXISTS", keys.fleet_paused(prefix)))
    commands += [("EXISTS", k.paused) for k in by_queue.values()]
    return commands


def decoded_views(
    wanted: Sequence[tuple[str, str]], replies: Sequence[Any], targets: bool = False
) -> list[JobView | None]:
    """The replies to `view_commands(wanted, ...)`: each job's view, None where its queue holds
    no such job."""
    n = len(wanted) * _VIEW_FIELDS
    fleet, *flags = replies[n:]
    paused = {q for q, flag in zip(_queues(wanted), flags, strict=True) if flag}
    fields = _chunks(list(replies[:n]), _VIEW_FIELDS)
    views = [_view(q, job_id, f) for (q, job_id), f in zip(wanted, fields, strict=True)]
    if targets:
        _with_targets(views, fields)
    for v in views:
        if v is not None and v.state in ("waiting", "delayed"):
            v.paused = "fleet" if fleet else "queue" if v.queue in paused else ""
    return views


def wanted_state(found: Sequence[JobView | None], state: str | None) -> list[JobView]:
    """The views in `state` (all, for None); one that cannot be read might be in any state, so
    it is kept whatever was asked."""
    return [v for v in found if v is not None and state in (None, v.state, UNREADABLE)]


def _queues(wanted: Sequence[tuple[str, str]]) -> list[str]:
    return list(dict.fromkeys(q for q, _ in wanted))


_VIEW_FIELDS = 10  # what `view_commands` asks per job, in the order `_view` unpacks it


def _view(queue: str, job_id: str, fields: list[Any]) -> JobView | None:
    if not fields[3] and fields[2] is None:  # neither known nor done
        return None
    try:
        return _decoded_view(queue, job_id, fields)
    except ValueError as exc:  # msgspec's errors, int() of garbage, bytes that are not UTF-8
        return JobView(job_id, queue, UNREADABLE, unreadable=detail("its fields", exc))


def _decoded_view(queue: str, job_id: str, fields: list[Any]) -> JobView:
    delayed, active, done, _, defer, result, lock, attempts, stalls, queued = fields
    view = JobView(
        job_id,
        queue,
        "waiting",
        int(attempts or 0) + 1,
        int(stalls or 0),
        iso(int(queued)) if queued else None,
    )
    view.defer = _defer.decode(defer) if defer else None
    if done is not None:
        view.result = _result.decode(result) if result else None
        view.state = view.result.state if view.result else "completed"
    elif active is not None:
        view.state, view.token = "active", _text(lock or b"")
        view.owner = view.token.rpartition(":")[0] or None
    elif delayed is not None:
        view.state, view.until = "delayed", iso(int(float(delayed)))
    return view


def _with_targets(views: list[JobView | None], fields: list[list[Any]]) -> None:
    for v, f in zip(views, fields, strict=True):
        if v is not None and isinstance(f[3], bytes):  # the document, read instead of HEXISTS
            v.target, v.project = _target(f[3])


def _target(raw: bytes) -> tuple[str, str]:
    """What the job works on (a repo ref or a folder's base name) and its project; "" for a
    document that does not decode (its view says why elsewhere)."""
    try:
        job = decode_job(raw)
    except InvalidJob:
        return "", ""
    return job.target(), job.project or ""


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
