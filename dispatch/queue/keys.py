"""Every Redis key dispatch uses is spelled here and nowhere else.

A queue's keys share one hash tag, `{<prefix>:<queue>}`, so each queue script touches a single
cluster slot. Fleet-wide keys (hosts, the queue and lease registries) live outside any queue's
slot and are only touched by plain commands, never by a multi-key script. The fleet pause
(`fleet_paused`) is one of them: each queue's own `paused` key carries a copy of it, which is
what `job_claim` reads (`fleet_pause.py` keeps the copies in step).

A Lua header names each of its KEYS by a field name of `QueueKeys`, `HostKeys` or `LeaseKeys`
below, in that script's own order (`job_enqueue` starts with `data`, `job_claim` with `wait`).
The field order here means nothing to the scripts: each wrapper (`Queue` in `transitions.py`,
`FleetLeases` in `dispatch/fleet/leases.py`, `HostOwner` in `dispatch/daemon/instance.py`)
passes its keys by name, in its script's header order. A host name's owner key is one key per
script call, so it needs no hash tag.
`tests/lua/test_headers.py` checks that every header name is a field here and that one call's
keys share a slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

# the default prefix is a setting's default, so it is declared beside the settings (the kernel)
from dispatch.config.settings import DEFAULT_PREFIX as DEFAULT_PREFIX  # re-exported


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue. Headers name these fields; field order is not KEYS order."""

    tag: str
    wait: str  # LIST of job ids ready to claim (claimed from the left)
    delayed: str  # ZSET id -> due ms
    active: str  # ZSET id -> lock deadline ms
    done: str  # ZSET id -> finished ms (completed, failed, cancelled)
    data: str  # HASH id -> job JSON as submitted
    queued: str  # HASH id -> enqueue instant ms (server time)
    lock: str  # HASH id -> lock token of the current claim
    attempts: str  # HASH id -> attempts spent (retries counted)
    stalls: str  # HASH id -> times its lock expired
    defer: str  # HASH id -> latest defer record JSON
    result: str  # HASH id -> final result JSON
    dedup: str  # HASH dedup key -> "<window end ms> <id>"
    dedup_exp: str  # ZSET dedup key -> when to look at the entry again (purge schedule)
    marker: str  # ZSET wake-up marker the daemons block on
    paused: str  # STRING present while the queue is paused
    fence: str  # STRING monotonic counter behind lock tokens
    cancel: str  # HASH id -> cancel request expiry ms
    runs: str  # HASH run id -> run record JSON (fleet mirror)
    runs_idx: str  # ZSET run id -> recorded ms (newest first for `runs`; mirror retention)

    def ack(self, job_id: str) -> str:
        """LIST the owning host pushes its name to when it takes a cancel request."""
        return f"{self.tag}:ack:{job_id}"

    def tail(self, job_id: str, attempt: int, fence: str) -> str:
        """STREAM the newest output of one run (the claim's fence tells two runs of an attempt
        apart), written only by that run's host (dispatch/records/tail.py), with a TTL."""
        return f"{self.tag}:tail:{job_id}:{attempt}:{fence}"

    def kill(self, job_id: str) -> str:
        """STRING, the claim token `dispatch cancel --kill` saw running (with a TTL): the owning
        host sends the engine's kill again to that run."""
        return f"{self.tag}:kill:{job_id}"


@lru_cache(maxsize=1024)  # frozen, and asked for per run (its tail key): built once per queue
def queue_keys(queue: str, prefix: str = DEFAULT_PREFIX) -> QueueKeys:
    tag = "{" + prefix + ":" + queue + "}"
    names = [f.name for f in QueueKeys.__dataclass_fields__.values() if f.name != "tag"]
    return QueueKeys(tag, *(f"{tag}:{name}" for name in names))


def queues_registry(prefix: str = DEFAULT_PREFIX) -> str:
    """SET of queue names ever submitted to, so readers can list the fleet."""
    return f"{prefix}:queues"


def fleet_paused(prefix: str = DEFAULT_PREFIX) -> str:
    """STRING present while the fleet is paused (`dispatch pause`): the truth queues copy."""
    return f"{prefix}:paused"


def hosts_registry(prefix: str = DEFAULT_PREFIX) -> str:
    """SET of host names that ever ran a daemon."""
    return f"{prefix}:hosts"


def hosts_seen(prefix: str = DEFAULT_PREFIX) -> str:
    """HASH host -> its last heartbeat's instant (server ms), kept after the host is gone, so
    `dispatch hosts` can say when it stopped beating."""
    return f"{prefix}:hosts:seen"


def host_alive(host: str, prefix: str = DEFAULT_PREFIX) -> str:
    """STRING with a short TTL, refreshed by the host's heartbeat: present means alive."""
    return f"{prefix}:host:{host}"


def host_drain(host: str, prefix: str = DEFAULT_PREFIX) -> str:
    """STRING JSON with a TTL: `dispatch drain` asks the host's daemon of that start to drain
    and exit (dispatch/fleet/drain.py); the daemon deletes it on its way out."""
    return f"{prefix}:host:{host}:drain"


@dataclass(frozen=True, slots=True)
class HostKeys:
    """The keys of one host name; host_*.lua headers name `owner`."""

    name: str
    owner: str  # STRING the one daemon process holding the name, with a TTL (daemon/instance.py)


def host_keys(host: str, prefix: str = DEFAULT_PREFIX) -> HostKeys:
    return HostKeys(host, f"{prefix}:host:{host}:owner")


@dataclass(frozen=True, slots=True)
class LeaseKeys:
    """The keys of one fleet lease; lease_*.lua headers name `holders` and `fence`."""

    name: str
    holders: str  # ZSET holder id -> expiry (server ms)
    fence: str  # STRING monotonic fencing counter; never expires, so fences never repeat


def lease_keys(name: str, prefix: str = DEFAULT_PREFIX) -> LeaseKeys:
    """Keys of the lease `name`, under one hash tag so each lease script hits one cluster slot."""
    if "{" in name or "}" in name:
        raise ValueError(f"lease name must not contain braces: {name!r}")
    tag = "{" + prefix + ":lease:" + name + "}"
    return LeaseKeys(name, f"{tag}:holders", f"{tag}:fence")


def leases_registry(prefix: str = DEFAULT_PREFIX) -> str:
    """SET of lease names ever acquired, so a boot sweep can find this host's stale holders."""
    return f"{prefix}:leases"


def wait_state(queue: str, job_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    """STRING a held job's wait state (JSON, gates/wait/state.py), with a backstop TTL."""
    return f"{prefix}:wait:state:{queue}:{job_id}"


def outcome_wait(queue: str, job_id: str, stalls: int, prefix: str = DEFAULT_PREFIX) -> str:
    """STRING set once per (job, stall count): the settled gate's one beat of waiting for a
    stalled run's late outcome (gates/settled.py), with a TTL."""
    return f"{prefix}:outcome-wait:{queue}:{job_id}:{stalls}"


def wait_claim(identity: str, prefix: str = DEFAULT_PREFIX) -> str:
    """STRING "<queue> <job id>" of the job holding a wait identity, with a TTL."""
    return f"{prefix}:wait:claim:{identity}"


def wait_cleared(identity: str, prefix: str = DEFAULT_PREFIX) -> str:
    """STRING the id of the job whose wait on this identity cleared, with a TTL."""
    return f"{prefix}:wait:cleared:{identity}"


@dataclass(frozen=True, slots=True)
class BudgetKeys:
    """Every spend-cap key, under ONE hash tag: a reservation checks and takes every ledger and
    window of a job in one script call (budget_*.lua headers name these fields)."""

    tag: str
    open: str  # ZSET reservation id -> 0: every unsettled reservation, read by lex range

    def reservation(self, rid: str) -> str:
        """HASH one reservation's record: counter key -> "<metric> <amount> <expire_at_ms>"."""
        return f"{self.tag}:res:{rid}"

    def counter(self, name: str) -> str:
        """HASH `used`, `held` of one metric, ledger and window: `<metric>:<ledger>:<period>`."""
        return f"{self.tag}:{name}"


def budget_keys(prefix: str = DEFAULT_PREFIX) -> BudgetKeys:
    tag = "{" + prefix + ":budget}"
    return BudgetKeys(tag, f"{tag}:open")


def trigger_state(trigger_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    """HASH of one trigger: paused, disabled (stall guard), since, skipped, last_skip, caught_up."""
    return f"{prefix}:trigger:{trigger_id}"


def trigger_minted(trigger_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    """ZSET "<job id> <queue> <sig>" -> occurrence ms: the jobs a trigger minted, newest kept."""
    return f"{prefix}:trigger:{trigger_id}:minted"


def triggers_registry(prefix: str = DEFAULT_PREFIX) -> str:
    """SET of trigger ids with minted jobs, so a trigger removed from the file is found."""
    return f"{prefix}:triggers"


def triggers_seen(prefix: str = DEFAULT_PREFIX) -> str:
    """STRING the epoch ms of the fleet's last minting round: a long gap means downtime."""
    return f"{prefix}:triggers:seen"
