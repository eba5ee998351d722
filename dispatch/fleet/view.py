"""The fleet at a glance: one snapshot, read from Redis alone, for `dispatch status`, `dispatch
hosts` and whatever shows the fleet next (a board, a page, metrics).

Three pipelined round trips, whatever the fleet's size:

1. the server's TIME, the registries (queues, hosts, their last beats) and the fleet pause;
2. per queue: how many wait, are delayed, are active, whether its own pause is set, and the
   first `SAMPLE` delayed ids; per host: its heartbeat;
3. the sampled jobs' defer records and enqueue instants.

Waiting jobs are counted by reason from that sample (the delayed set's first `SAMPLE` ids, due
soonest first), and the snapshot says how many it looked at of how many: reading every defer
record of a 100,000-job backlog would cost more than a status line is worth. A job in `wait`
is counted as ready. Each call is bounded by `timeout_s`; a Redis that does not answer in time
gives a snapshot whose `error` says so, never a hang.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from dispatch.model import DeferRecord
from dispatch.queue import fleet_pause, heartbeats, keys

SAMPLE = 2_000  # delayed jobs per queue whose reason is read
GONE_AFTER_MS = 7 * 86_400_000  # a host silent longer than this is no longer listed


@dataclass
class QueueRow:
    name: str
    ready: int = 0  # in wait: claimable now
    delayed: int = 0
    active: int = 0
    paused: bool = False  # its own pause key is set


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
    queues: list[QueueRow] = field(default_factory=list)
    reasons: dict[str, Waiting] = field(default_factory=dict)
    sampled: int = 0  # delayed jobs whose reason was read
    hosts: list[HostRow] = field(default_factory=list)

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
        p.time()
        p.smembers(keys.queues_registry(prefix))
        p.smembers(keys.hosts_registry(prefix))
        p.hgetall(keys.hosts_seen(prefix))
        p.get(keys.fleet_paused(prefix))
        (seconds, micros), queue_names, host_names, seen, standing = await p.execute()
    snap = Snapshot(at_ms=int(seconds) * 1000 + int(micros) // 1000)
    names = sorted({_text(n) for n in queue_names} | {fleet_pause.SHARED_QUEUE})
    last_seen = {_text(h): int(ms) for h, ms in seen.items()}
    hosts = sorted({_text(h) for h in host_names} | set(last_seen))
    ids = await _counts(redis, prefix, snap, names, hosts, last_seen)
    if standing is not None:
        snap.paused = "fleet"
    elif snap.paused_queues:
        snap.paused = "partial"
    await _reasons(redis, prefix, snap, ids)
    return snap


async def _counts(
    redis: Redis,
    prefix: str,
    snap: Snapshot,
    names: list[str],
    hosts: list[str],
    last_seen: dict[str, int],
) -> dict[str, list[str]]:
    """Round trip 2: queue counts and the sampled delayed ids; the hosts' beats."""
    qk = [keys.queue_keys(name, prefix) for name in names]
    async with redis.pipeline(transaction=False) as p:
        for k in qk:
            p.llen(k.wait)
            p.zcard(k.delayed)
            p.zcard(k.active)
            p.exists(k.paused)
            p.zrange(k.delayed, 0, SAMPLE - 1)
        for host in hosts:
            p.get(keys.host_alive(host, prefix))
        replies = await p.execute()
    ids: dict[str, list[str]] = {}
    for i, name in enumerate(names):
        ready, delayed, active, paused, sample = replies[5 * i : 5 * i + 5]
        snap.queues.append(QueueRow(name, int(ready), int(delayed), int(active), bool(paused)))
        if paused:
            snap.paused_queues.append(name)
        ids[name] = [_text(j) for j in sample]
    beats = replies[5 * len(names) :]
    for host, raw in zip(hosts, beats, strict=True):
        row = _host(host, raw, last_seen.get(host))
        if row.alive or (row.last_beat_ms and snap.at_ms - row.last_beat_ms < GONE_AFTER_MS):
            snap.hosts.append(row)
    return ids


async def _reasons(redis: Redis, prefix: str, snap: Snapshot, ids: dict[str, list[str]]) -> None:
    """Round trip 3: the sampled jobs' reasons and enqueue instants."""
    wanted = [(name, job_ids) for name, job_ids in ids.items() if job_ids]
    if not wanted:
        return
    async with redis.pipeline(transaction=False) as p:
        for name, job_ids in wanted:
            k = keys.queue_keys(name, prefix)
            p.hmget(k.defer, job_ids)
            p.hmget(k.queued, job_ids)
        replies = await p.execute()
    for i in range(len(wanted)):
        for raw, queued in zip(replies[2 * i], replies[2 * i + 1], strict=True):
            snap.sampled += 1
            reason = _reason(raw)
            row = snap.reasons.setdefault(reason, Waiting())
            row.count += 1
            at = int(queued) if queued else None
            if at is not None and (row.oldest_ms is None or at < row.oldest_ms):
                row.oldest_ms = at
    snap.reasons = dict(sorted(snap.reasons.items(), key=lambda kv: -kv[1].count))


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
