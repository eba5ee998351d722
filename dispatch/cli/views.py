"""What the operator reads: tables, a job's story in plain words, and their JSON forms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from dispatch.model import DeferRecord, Result, RunRecord, one_line
from dispatch.queue.pause_marks import PauseState
from dispatch.reasons import lookup
from dispatch.records.job_views import CancelAnswer, JobView
from dispatch.records.unreadable import UNREADABLE, Unreadable

_STATE_ORDER = ["active", "waiting", "delayed", "failed", "cancelled", "completed", UNREADABLE]
_SHORT = 60  # an unreadable record's detail, as a table cell


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    if not rows:
        return "(none)"
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    return "\n".join(lines)


def jobs_table(views: Sequence[JobView]) -> str:
    # by state, each as given (a listing comes oldest first: cli/filters.oldest_first)
    ordered = sorted(views, key=lambda v: _STATE_ORDER.index(v.state))
    rows = [
        (
            v.state,
            v.id,
            v.queue,
            v.reason or v.unreadable[:_SHORT] or "-",
            v.until or "-",
            v.owner or "-",
        )
        for v in ordered
    ]
    return _table(rows, ("STATE", "ID", "QUEUE", "REASON", "UNTIL", "HOST"))


def pause_lines(state: PauseState) -> list[str]:
    """What `dispatch jobs` says above its table while anything is paused."""
    lines = []
    if state.fleet is not None:
        f = state.fleet
        given = "".join((f" at {f.at}" if f.at else "", f" from {f.by}" if f.by else ""))
        lines.append(
            f"The fleet is paused (dispatch pause{given}): no job starts until dispatch resume."
        )
    elif state.queues:
        lines.append(
            f"Paused queues: {', '.join(state.queues)}; no job starts from them until"
            " dispatch resume."
        )
    return lines


def pause_line(command: str, queues: Sequence[str]) -> str:
    if command == "pause":
        return (
            f"paused the fleet: no queue starts a job until dispatch resume"
            f" (queues now: {', '.join(queues)}; a new one pauses as it is first read)"
        )
    return f"resumed the fleet: {', '.join(queues)}"


def jobs_json(views: Sequence[JobView]) -> str:
    return msgspec.json.encode([v.as_json() for v in views]).decode()


def runs_table(records: Sequence[RunRecord | Unreadable]) -> str:
    rows = [_run_row(r) for r in records]
    return _table(rows, ("ENDED", "ID", "ATTEMPT", "HOST", "OUTCOME", "REASON", "EXIT", "WHY"))


def _run_row(r: RunRecord | Unreadable) -> tuple[str, ...]:
    if isinstance(r, Unreadable):
        job_id, _, attempt = r.id.rpartition("#")
        return ("-", job_id, attempt, "-", UNREADABLE, "-", "-", r.detail)
    return (
        r.ended_at or "-",
        r.id,
        str(r.attempt),
        r.host,
        r.outcome,
        r.reason or "-",
        "-" if r.exit_code is None else str(r.exit_code),
        one_line(r.sentence) or "-",  # last: a long sentence moves no other column
    )


def runs_json(records: Sequence[RunRecord | Unreadable]) -> str:
    rows = [r.as_json() if isinstance(r, Unreadable) else r for r in records]
    return msgspec.json.encode(rows).decode()


def why_json(
    v: JobView, runs: Sequence[RunRecord] = (), stuck: Mapping[str, str] | None = None
) -> str:
    story = v.as_json()
    story["stop_did_not_take"] = dict(stuck) if stuck else None
    story["degraded"] = [
        {"attempt": r.attempt, "host": r.host, "leases": list(r.degraded)}
        for r in runs
        if r.degraded
    ]
    return msgspec.json.encode(story).decode()


def why_text(
    v: JobView, runs: Sequence[RunRecord] = (), stuck: Mapping[str, str] | None = None
) -> str:
    """The job's story; `runs` (its attempts' records) add what an operator must know of them,
    and `stuck` (its owner's word that the run's stop did not take) what is still alive."""
    lines = [f"Job {v.id} on queue {v.queue} is {v.state}."]
    if v.queued_at:
        lines.append(f"It was queued at {v.queued_at}.")
    lines += _state_sentences(v)
    if stuck:
        lines.append(stuck_line(v.id, v.owner or "its host", stuck))
    if v.defer and v.state != "delayed":
        d = v.defer
        lines.append(
            f"Its last deferral was {d.reason} at {d.at} on {d.host}"
            + (f" ({d.detail})." if d.detail else ".")
        )
    lines += [_degraded(r) for r in runs if r.degraded]
    return "\n".join(lines)


def stuck_line(job_id: str, host: str, stuck: Mapping[str, str]) -> str:
    """`stopping since HH:MM, container X still alive`, with what holds and what to do."""
    since = stuck.get("since", "")
    at = f"{since[11:16]} UTC" if len(since) >= 16 else "a while"
    return (
        f"It is stopping since {at} ({stuck.get('reason') or 'aborted'}), {stuck.get('run')}"
        f" still alive on {host}: its folder, slots and budget stay held until it is gone;"
        f" `dispatch cancel --kill {job_id}` sends the kill again."
    )


def _degraded(r: RunRecord) -> str:
    names = ", ".join(r.degraded)
    return (
        f"Attempt {r.attempt} ran on {r.host} while Redis could not be reached, on fleet"
        f" lease {names} granted without it: that limit was not checked across hosts."
    )


def _state_sentences(v: JobView) -> list[str]:
    if v.state == UNREADABLE:
        return [f"What Redis holds of it cannot be read ({v.unreadable}); nothing was changed."]
    if v.state == "waiting":
        said = [f"It is ready and waits for a host with a free slot (attempt {v.attempt})."]
        return said + _paused(v)
    if v.state == "active":
        return [f"It is running on {v.owner or 'an unknown host'} (attempt {v.attempt})."]
    if v.state == "delayed":
        if v.defer is None:
            return [f"It is scheduled to start at {v.until}.", *_paused(v)]
        return _waiting(v, v.defer) + _paused(v)
    if v.result is None:
        return ["It finished; its result is no longer kept."]
    return _ended(v, v.result)


def _paused(v: JobView) -> list[str]:
    if v.paused == "fleet":
        return ["The fleet is paused: no job starts until dispatch resume."]
    if v.paused == "queue":
        return [f"Its queue {v.queue} is paused: no job starts from it until dispatch resume."]
    return []


def _waiting(v: JobView, d: DeferRecord) -> list[str]:
    said = [
        f"It waits: {d.reason} ({_explained(d.reason)}),"
        f" since {d.since or d.at}, until {v.until}; last checked at {d.at}"
        f" by {d.host or 'a host'}."
    ]
    if d.holder:
        said.append(f"What it needs is held by {d.holder}.")
    if d.detail:
        said.append(f"Detail: {d.detail}.")
    return said


def _ended(v: JobView, r: Result) -> list[str]:
    exit_part = f", exit code {r.exit_code}" if r.exit_code is not None else ""
    said = [
        f"It ended {r.ended_at} on {r.host or 'a host'}: {r.outcome}"
        + (f" ({r.reason})" if r.reason else "")
        + f"{exit_part}."
    ]
    if v.sentence:
        said.append(f"Why{_source(r.reason)}: {_period(one_line(v.sentence))}")
    return said


def _explained(token: str) -> str:
    """Where a reason comes from and what it means; a newer release's token is shown as is."""
    entry = lookup(token)
    return f"{entry.source}: {entry.sentence}" if entry else "see the reason"


def _source(token: str) -> str:
    entry = lookup(token)
    return f" ({entry.source})" if entry else ""


def _period(sentence: str) -> str:
    return sentence if sentence.endswith((".", "!", "?")) else sentence + "."


def cancel_line(job_id: str, answer: CancelAnswer) -> tuple[str, int]:
    match answer.outcome:
        case "cancelled" if answer.host:
            return (
                f"{job_id}: cancelled by host {answer.host} as its claim ended (operator-cancel)",
                0,
            )
        case "cancelled":
            return f"{job_id}: cancelled before it started (operator-cancel)", 0
        case "taken":
            return f"{job_id}: cancel taken by host {answer.host}; the run is being stopped", 0
        case "killed":
            return f"{job_id}: killed by host {answer.host}; the run is gone", 0
        case "kill-sent":
            return (
                f"dispatch: {job_id}: host {answer.host} sent the kill, but the run was not gone"
                " in time; `dispatch why` says whether it still is",
                1,
            )
        case "finished":
            return f"dispatch: {job_id} has already finished; nothing to cancel", 1
        case "unowned":
            return (
                f"dispatch: {job_id} is active but no live host owns it"
                f" (last owner {answer.host or 'unknown'}); nothing changed",
                1,
            )
        case _:
            return (
                f"dispatch: {job_id}: host {answer.host} did not acknowledge the cancel in time;"
                " the request stands for a while",
                1,
            )
