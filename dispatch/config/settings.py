"""Settings from the environment (prefix `DISPATCH_`), parsed once, each with a default.

An unset `DISPATCH_REDIS_URL` means the embedded default: a redis-server that `dispatch up`
starts with AOF persistence in the state dir, reached through a unix socket there, so every
command on this machine finds it without further configuration.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dispatch.errors import ConfigError
from dispatch.queue.keys import DEFAULT_PREFIX

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def parse_duration_ms(text: str) -> int:
    """'90s', '10m', '2h', '1d', '250ms'; a bare number is seconds."""
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"{text!r} is not a duration (try 30s, 10m, 2h, 1d)")
    return int(float(m.group(1)) * _UNIT_MS[m.group(2) or "s"])


def default_host() -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:63].strip("-.")
    return name or "localhost"


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / fallback)


def default_state_dir() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state") / "dispatch"


def default_config_dir() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / "dispatch"


@dataclass(frozen=True)
class Settings:
    redis_url: str
    embedded: bool  # True when no Redis URL was given: `dispatch up` runs its own
    prefix: str = DEFAULT_PREFIX
    host: str = field(default_factory=default_host)
    concurrency: int = 3
    state_dir: Path = field(default_factory=default_state_dir)
    config_dir: Path = field(default_factory=default_config_dir)
    runner: str = "docker"
    lock_ms: int = 60_000  # at least 3 x (stop grace + renewal period): see _check
    renew_s: float = 2.0  # lock renewal period, also how fast a cancel request is seen
    sweep_s: float = 10.0  # how often each queue's expired locks are swept
    lease_ttl_s: float = 30.0  # a fleet lease lapses this long after its last renewal
    max_stalls: int = 1
    shutdown_grace_s: float = 30.0
    stop_grace_s: float = 10.0
    engine_wait_ms: int = 10 * 60_000  # how long a job waits for an unreachable Docker engine
    reconcile_s: float = 60.0  # how often the runner's runs are checked against live claims
    image: str = "dispatch-test:latest"
    job_memory: int = 4 * 1024**3  # default job size, bytes (a project's row comes first)
    job_cpus: float = 2.0
    host_memory: int | None = None  # this host's job budget; None: fixed concurrency only
    host_cpus: float | None = None
    # the wait-for gate (gates/wait.py); README "Waiting for a condition"
    wait_after_max_ms: int = 30 * 86_400_000  # an `after` further out is refused
    wait_check_slots: int = 1  # checks at once on this host (never the last job slot)
    wait_fleet_checks: int | None = None  # checks at once fleet-wide; None: unbounded
    wait_interval_ms: int = 60_000  # between checks of one job, before the backoff
    wait_max_ms: int = 86_400_000  # the longest a job holds on its checks
    wait_max_checks: int = 96
    wait_max_faults: int = 5  # checks in a row that could not tell

    @property
    def queues(self) -> list[str]:
        """The shared queue and this host's own (local folders live on one machine)."""
        return ["jobs", f"jobs@{self.host}"]


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Read the settings; raise ConfigError naming the first bad variable."""
    env = os.environ if env is None else env
    get = env.get
    state_dir = Path(get("DISPATCH_STATE_DIR") or default_state_dir())
    url = get("DISPATCH_REDIS_URL", "")
    values: dict[str, object] = {
        "redis_url": url or f"unix://{state_dir / 'redis.sock'}",
        "embedded": not url,
        "state_dir": state_dir,
    }
    for name, key, parse in _FIELDS:
        raw = get(key)
        if raw:
            try:
                values[name] = parse(raw)
            except (ValueError, ConfigError) as exc:
                raise ConfigError(f"{key}={raw!r}: {exc}") from None
    settings = Settings(**values)  # type: ignore[arg-type]
    _check(settings)
    return settings


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError("must be a positive integer")
    return value


def _host(raw: str) -> str:
    if not _HOST.match(raw):
        raise ValueError("host names use A-Z a-z 0-9 . _ - (at most 63)")
    return raw


def _runner(raw: str) -> str:
    if raw not in ("docker", "process"):
        raise ValueError("runner is docker or process")
    return raw


_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_UNIT_BYTES = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_memory(text: str) -> int:
    """Bytes from `512m`, `4g`, `1.5g` or a plain byte count (binary units, like Docker)."""
    m = _MEMORY.match(text)
    if not m:
        raise ValueError(f"memory size {text!r} is not like 512m or 4g")
    return int(float(m.group(1)) * _UNIT_BYTES[m.group(2).lower()])


def _cpus(raw: str) -> float:
    value = float(raw)
    if not 0 < value <= 1024:
        raise ValueError("CPUs must be above 0")
    return value


def _seconds(raw: str) -> float:
    return parse_duration_ms(raw) / 1000


_FIELDS: list[tuple[str, str, Callable[[str], object]]] = [
    ("config_dir", "DISPATCH_CONFIG_DIR", Path),
    ("prefix", "DISPATCH_PREFIX", str),
    ("host", "DISPATCH_HOST", _host),
    ("concurrency", "DISPATCH_CONCURRENCY", _positive_int),
    ("runner", "DISPATCH_RUNNER", _runner),
    ("lock_ms", "DISPATCH_LOCK_MS", _positive_int),
    ("renew_s", "DISPATCH_RENEW_EVERY", _seconds),
    ("sweep_s", "DISPATCH_SWEEP_EVERY", _seconds),
    ("lease_ttl_s", "DISPATCH_LEASE_TTL", _seconds),
    ("max_stalls", "DISPATCH_MAX_STALLS", int),
    ("shutdown_grace_s", "DISPATCH_SHUTDOWN_GRACE", _seconds),
    ("stop_grace_s", "DISPATCH_STOP_GRACE", _seconds),
    ("engine_wait_ms", "DISPATCH_ENGINE_WAIT_MAX", parse_duration_ms),
    ("reconcile_s", "DISPATCH_RECONCILE_EVERY", _seconds),
    ("image", "DISPATCH_IMAGE", str),
    ("job_memory", "DISPATCH_JOB_MEMORY", parse_memory),
    ("job_cpus", "DISPATCH_JOB_CPUS", _cpus),
    ("host_memory", "DISPATCH_HOST_MEMORY", parse_memory),
    ("host_cpus", "DISPATCH_HOST_CPUS", _cpus),
    ("wait_after_max_ms", "DISPATCH_WAIT_AFTER_MAX", parse_duration_ms),
    ("wait_check_slots", "DISPATCH_WAIT_CHECK_SLOTS", _positive_int),
    ("wait_fleet_checks", "DISPATCH_WAIT_FLEET_CHECKS", _positive_int),
    ("wait_interval_ms", "DISPATCH_WAIT_INTERVAL", parse_duration_ms),
    ("wait_max_ms", "DISPATCH_WAIT_MAX", parse_duration_ms),
    ("wait_max_checks", "DISPATCH_WAIT_MAX_CHECKS", _positive_int),
    ("wait_max_faults", "DISPATCH_WAIT_MAX_FAULTS", _positive_int),
]


def _check(s: Settings) -> None:
    if s.lock_ms < 3000:
        raise ConfigError("DISPATCH_LOCK_MS must be at least 3000")
    if s.renew_s <= 0 or s.sweep_s <= 0:
        raise ConfigError("DISPATCH_RENEW_EVERY and DISPATCH_SWEEP_EVERY must be above 0")
    # A run is stopped before its lock can lapse (daemon/lock_keeper.py): the lock must leave
    # room for the stop grace and two missed renewals, with a margin.
    floor_ms = 3 * (s.stop_grace_s + s.renew_s) * 1000
    if s.lock_ms < floor_ms:
        raise ConfigError(
            f"DISPATCH_LOCK_MS={s.lock_ms} is too short for DISPATCH_STOP_GRACE and "
            f"DISPATCH_RENEW_EVERY: it must be at least 3 x (grace + renewal) = {floor_ms:.0f}"
        )
    if s.lease_ttl_s < 1:
        raise ConfigError("DISPATCH_LEASE_TTL must be at least 1s")
    if s.max_stalls < 0:
        raise ConfigError("DISPATCH_MAX_STALLS must be 0 or more")
    if s.reconcile_s < 1:  # each round lists the engine's containers: not a busy loop
        raise ConfigError("DISPATCH_RECONCILE_EVERY must be at least 1s")
    _check_waits(s)


WAIT_INTERVAL_FLOOR_MS = 30_000  # a check every few seconds would be a poll, not a wait


def _check_waits(s: Settings) -> None:
    if s.wait_interval_ms < WAIT_INTERVAL_FLOOR_MS:
        raise ConfigError("DISPATCH_WAIT_INTERVAL must be at least 30s")
    if s.wait_max_ms < 1000 or s.wait_after_max_ms < 1000:
        raise ConfigError("DISPATCH_WAIT_MAX and DISPATCH_WAIT_AFTER_MAX must be at least 1s")
