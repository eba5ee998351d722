"""The fleet at a glance: one snapshot, read from Redis alone, for `dispatch status`, `dispatch
hosts` and whatever shows the fleet next (a board, a page, metrics).

Three pipelined round trips, whatever the fleet's size:

1. the server's TIME, the registries (queues, hosts, their last beats) and the fleet pause;
2. per queue: how many wait, are delayed, are active, whether its own pause is set, the
   first `SAMPLE` delayed ids and the ids of the runs recorded in the last hour (newest
   `RECENT_SCAN`); per host: its heartbeat (running jobs, budget promised);
3. the sampled jobs' defer records and enqueue instants, and those runs' records.

Waiting jobs are counted by reason from that sample (the delayed set's first `SAMPLE` ids, due
soonest first), and the snapshot says how many it looked at of how many: reading every defer
record of a 100,000-job backlog would cost more than a status line is worth. A job in `wait`
is counted as ready. Runs of the last hour that ended wrong (failed, infra, policy) are counted
by reason, and the newest `RECENT` of every outcome are listed. A job a beat names running
whose record, read in the same snapshot, says that run has ended is not shown running: the
view never shows one run both running and ended. Each call is bounded by
`timeout_s`; a Redis that does not answer in time gives a snapshot whose `error` says so, never
a hang.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from dispatch import reasons
from dispatch.model import DeferRecord, RunRecord, instant_ms
from dispatch.queue import fleet_pause, heartbeats, keys
from dispatch.queue.connect import with_time

SAMPLE = 2_000  # delayed jobs per queue whose reason is read
RECENT_SCAN = 500  # run records per queue read for the last hour's failures
RECENT = 20  # endings listed, newest first
HOUR_MS = 3_600_000
WRONG = (reasons.FAILED, reasons.INFRA, reasons.POLICY)  # outcomes counted as failures
GONE_AFTER_MS = 7 * 86_400_000  # a host silent longer than this is no longer listed


@dataclass
class QueueRow:
    name: str
    ready: int = 0  # in wait: claimable now
    delayed: int = 0
    active: int = 0
    paused: bool = False  # its own pause key is set


@dataclass
class RunningJob:
    id: str
    queue: str
    target: str = ""
    started_ms: int | None = None  # when its host claimed it (the host's clock)


@dataclass
class Promised:
    """Memory (bytes) and CPUs reserved by a host's running jobs, against its job budget."""

    memory: int = 0
    memory_limit: int = 0
    cpus: float = 0.0
    cpus_limit: float = 0.0


@dataclass
class Ending:
    id: str
    queue: str
    outcome: str
    reason: str = ""
    ended_ms: int | None = None
    host: str = ""
    attempt: int = 0


@dataclass
class HostRow:
    name: str
    alive: bool
    last_beat_ms: int | None = None
    running: int = 0
    slots: int | None = None
    version: str = ""
    started_ms: int | None = None
    offset_ms: int | None = None
    stuck: int = 0  # runs whose stop did not take
    mints: bool = False  # publishes a trigger fingerprint
    draining: bool = False  # claims nothing more: `dispatch drain`, or a stop under way
    jobs: list[RunningJob] = field(default_factory=list)  # the first the beat names
    promised: Promised | None = None


@dataclass
class Waiting:
    count: int = 0
    oldest_ms: int | None = None  # when the longest-waiting of them was queued


@dataclass
class Snapshot:
    at_ms: int = 0  # the server's instant
    error: str = ""  # why nothing, or not everything, could be read
    paused: str = ""  # "" | "fleet" (dispatch pause) | "partial" (some queues' own keys)
    paused_queues: list[str] = field(default_factory=list)
    paused_at: str = ""  # the fleet pause's: when it was given (ISO-8601) and from which host
    paused_by: str = ""
    queues: list[QueueRow] = field(default_factory=list)
    reasons: dict[str, Waiting] = field(default_factory=dict)
    sampled: int = 0  # delayed jobs whose reason was read
    hosts: list[HostRow] = field(default_factory=list)
    recent: list[Ending] = field(default_factory=list)  # newest first
    failures: dict[str, int] = field(default_factory=dict)  # reason token -> runs, last hour
    runs_read: int = 0  # run records of the last hour read (RECENT_SCAN per queue at most)
    runs_hour: int = 0  # runs recorded in the last hour, all queues

    @property
    def live(self) -> list[HostRow]:
        return [h for h in self.hosts if h.alive]

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = msgspec.to_builtins(self)
        return found | {
            "running": sum(h.running for h in self.live),
            "slots": sum(h.slots or 0 for h in self.live),
        }


async def snapshot(redis: Redis, prefix: str, timeout_s: float = 5.0) -> Snapshot:
    """The fleet now; on a Redis fault or timeout, a snapshot with `error` set."""
    try:
        return await asyncio.wait_for(_read(redis, prefix), timeout_s)
    except TimeoutError:
        return Snapshot(error=f"Redis did not answer within {timeout_s:g} s")
    except (RedisError, OSError) as exc:
        return Snapshot(error=f"Redis cannot be read: {type(exc).__name__}: {exc}")


async def _read(redis: Redis, prefix: str) -> Snapshot:
    async with redis.pipeline(transaction=False) as p:
        p.smembers(keys.queues_registry(prefix))
        p.smembers(keys.hosts_registry(prefix))
        p.hgetall(keys.hosts_seen(prefix))
        p.get(keys.fleet_paused(prefix))
        (seconds, micros), (queue_names, host_names, seen, standing) = await with_time(redis, p)
    snap = Snapshot(at_ms=int(seconds) * 1000 + int(micros) // 1000)
    names = sorted({_text(n) for n in queue_names} | {fleet_pause.SHARED_QUEUE})
    last_seen = {_text(h): int(ms) for h, ms in seen.items()}
    hosts = sorted({_text(h) for h in host_names} | set(last_seen))
    sampled = await _counts(redis, prefix, snap, names, hosts, last_seen)
    if (given := fleet_pause.decode(standing)) is not None:
        snap.paused, snap.paused_at, snap.paused_by = "fleet", given.at, given.by
    elif snap.paused_queues:
        snap.paused = "partial"
    await _details(redis, prefix, snap, sampled)
    return snap


# queue -> delayed ids, last hour's run ids: as Redis gave them, sent back as they are (thousands
# of arguments; decoding and encoding each again cost more than the rest of the snapshot)
Sampled = dict[str, tuple[list[bytes], list[bytes]]]


async def _counts(
    redis: Redis,
    prefix: str,
    snap: Snapshot,
    names: list[str],
    hosts: list[str],
    last_seen: dict[str, int],
) -> Sampled:
    """Round trip 2: queue counts, the sampled delayed ids and the last hour's run ids; the
    hosts' beats."""
    qk = [keys.queue_keys(name, prefix) for name in names]
    hour_ago = snap.at_ms - HOUR_MS
    async with redis.pipeline(transaction=False) as p:
        for k in qk:
            p.llen(k.wait)
            p.zcard(k.delayed)
            p.zcard(k.active)
            p.exists(k.paused)
            p.zrange(k.delayed, 0, SAMPLE - 1)
            p.zcount(k.runs_idx, hour_ago, "+inf")
            p.zrevrangebyscore(k.runs_idx, "+inf", hour_ago, start=0, num=RECENT_SCAN)
        for host in hosts:
            p.get(keys.host_alive(host, prefix))
        replies = await p.execute()
    sampled: Sampled = {}
    for i, name in enumerate(names):
        ready, delayed, active, paused, sample, hour, runs = replies[7 * i : 7 * i + 7]
        snap.queues.append(QueueRow(name, int(ready), int(delayed), int(active), bool(paused)))
        if paused:
            snap.paused_queues.append(name)
        snap.runs_hour += int(hour)
        sampled[name] = (sample, runs)
    beats = replies[7 * len(names) :]
    for host, raw in zip(hosts, beats, strict=True):
        row = _host(host, raw, last_seen.get(host))
        if row.alive or (row.last_beat_ms and snap.at_ms - row.last_beat_ms < GONE_AFTER_MS):
            snap.hosts.append(row)
    return sampled


async def _details(redis: Redis, prefix: str, snap: Snapshot, sampled: Sampled) -> None:
    """Round trip 3: the sampled jobs' reasons and enqueue instants; the runs' records."""
    wanted = [(name, ids, runs) for name, (ids, runs) in sampled.items() if ids or runs]
    if not wanted:
        return
    async with redis.pipeline(transaction=False) as p:
        for name, ids, runs in wanted:
            k = keys.queue_keys(name, prefix)
            if ids:
                p.hmget(k.defer, ids)
                p.hmget(k.queued, ids)
            if runs:
                p.hmget(k.runs, runs)
        replies = iter(await p.execute())
    endings: list[Ending] = []
    for name, ids, runs in wanted:
        if ids:
            _count_reasons(snap, next(replies), next(replies))
        if runs:
            endings.extend(_endings(snap, name, next(replies)))
    snap.reasons = dict(sorted(snap.reasons.items(), key=lambda kv: -kv[1].count))
    endings.sort(key=lambda e: e.ended_ms or 0, reverse=True)
    _drop_ended(snap.hosts, endings)
    snap.recent = endings[:RECENT]
    snap.failures = dict(sorted(snap.failures.items(), key=lambda kv: -kv[1]))


def _count_reasons(snap: Snapshot, defers: list[Any], queued: list[Any]) -> None:
    for raw, at_raw in zip(defers, queued, strict=True):
        snap.sampled += 1
        row = snap.reasons.setdefault(_reason(raw), Waiting())
        row.count += 1
        at = int(at_raw) if at_raw else None
        if at is not None and (row.oldest_ms is None or at < row.oldest_ms):
            row.oldest_ms = at


def _drop_ended(hosts: list[HostRow], endings: list[Ending]) -> None:
    """A job a host's beat names running, whose run record from that host this read finds
    ended since the claim the beat names, runs no more: the beat is up to one beat old, the
    record is this read's. Both instants are the host's own clock; a later run of the job on
    that host was claimed after the earlier one ended, so it stays."""
    last_end: dict[tuple[str, str], int] = {}
    for e in endings:  # newest first: the first of a (host, job) is its last end
        if e.ended_ms is not None:
            last_end.setdefault((e.host, e.id), e.ended_ms)
    for h in hosts:
        kept = [j for j in h.jobs if not _ended_since(j, last_end.get((h.name, j.id)))]
        h.running = max(h.running - (len(h.jobs) - len(kept)), 0)
        h.jobs = kept


def _ended_since(job: RunningJob, ended_ms: int | None) -> bool:
    return ended_ms is not None and job.started_ms is not None and ended_ms >= job.started_ms


def _endings(snap: Snapshot, queue: str, raws: list[Any]) -> list[Ending]:
    found = []
    for raw in raws:
        record = _record(raw)
        if record is None:
            continue
        snap.runs_read += 1
        reason = record.reason.partition(":")[0].strip()  # the catalogue's token, not the text
        if record.outcome in WRONG:
            key = reason or record.outcome
            snap.failures[key] = snap.failures.get(key, 0) + 1
        ended = instant_ms(record.ended_at) if record.ended_at else None
        found.append(
            Ending(record.id, queue, record.outcome, reason, ended, record.host, record.attempt)
        )
    return found


def _record(raw: bytes | None) -> RunRecord | None:
    if not raw:
        return None  # expired between the index and the read
    try:
        return msgspec.json.decode(raw, type=RunRecord)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _reason(raw: bytes | None) -> str:
    """A delayed job's reason; one delayed with no defer record waits for its `--after`."""
    if not raw:
        return "scheduled"
    try:
        return msgspec.json.decode(raw, type=DeferRecord).reason
    except (msgspec.DecodeError, msgspec.ValidationError):
        return "unreadable"


def _host(name: str, raw: bytes | None, last_beat_ms: int | None) -> HostRow:
    beat = heartbeats.decode(raw) or {}
    return HostRow(
        name,
        alive=raw is not None,
        last_beat_ms=last_beat_ms,
        running=_int(beat.get("running")) or 0,
        slots=_int(beat.get("slots")),
        version=str(beat.get("version") or ""),
        started_ms=_int(beat.get("started_ms")),
        offset_ms=_int(beat.get("offset_ms")),
        stuck=len(beat.get("stuck") or ()),
        mints=isinstance(beat.get("triggers"), str),
        draining=beat.get("draining") is True,
        jobs=[job for raw in beat.get("jobs") or () if (job := _running(raw)) is not None],
        promised=_promised(beat.get("budget")),
    )


def _running(raw: object) -> RunningJob | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        return None
    return RunningJob(
        raw["id"], str(raw.get("queue") or ""), str(raw.get("target") or ""),
        _int(raw.get("since_ms")),
    )  # fmt: skip


def _promised(raw: object) -> Promised | None:
    if not isinstance(raw, dict):
        return None
    numbers = {k: raw.get(k) for k in ("memory", "memory_limit", "cpus", "cpus_limit")}
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers.values()):
        return None
    return Promised(
        int(raw["memory"]), int(raw["memory_limit"]), float(raw["cpus"]), float(raw["cpus_limit"])
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def age(at_ms: int, since_ms: int | None) -> str:
    """`3m`, `2h05m`, `4d`: how long ago, for a line an operator reads."""
    if since_ms is None:
        return "-"
    s = max(at_ms - since_ms, 0) // 1000
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86_400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86_400}d"


def clock(ms: int | None) -> str:
    """An instant in this machine's zone, to the minute."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M %Z")
