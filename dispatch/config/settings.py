"""Settings from the environment (prefix `DISPATCH_`), parsed once, each with a default.

Every `DISPATCH_*` variable dispatch reads is parsed here and nowhere else, so a bad value
stops the command or the daemon with one line naming the variable, never a traceback later.
Sizes and durations follow the one grammar of `dispatch.config.units`. To add a setting: a
field on `Settings` and one row in `_FIELDS` (field, variable, parser raising ValueError).

An unset `DISPATCH_REDIS_URL` means the embedded default: a redis-server that `dispatch up`
starts with AOF persistence in the state dir, reached through a unix socket there, so every
command on this machine finds it without further configuration.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from dispatch.config.redis_target import redis_target
from dispatch.config.units import (
    MAX_HOST_CPUS,
    MAX_HOST_MEMORY,
    parse_bytes,
    parse_cpus,
    parse_seconds,
    shown,
)
from dispatch.config.units import parse_duration_ms as parse_duration_ms  # re-exported
from dispatch.config.units import parse_memory as parse_memory  # re-exported
from dispatch.errors import ConfigError

RunnerName = Literal["docker", "process"]  # DISPATCH_RUNNER
DEFAULT_PREFIX = "dispatch"  # of every Redis key (DISPATCH_PREFIX); dispatch.queue.keys spells them
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


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
    runner: RunnerName = "docker"
    lock_ms: int = 60_000  # at least 3 x (stop grace + renewal period): see _check
    renew_s: float = 2.0  # lock renewal period, also how fast a cancel request is seen
    sweep_s: float = 10.0  # how often each queue's expired locks are swept
    lease_ttl_s: float = 30.0  # a fleet lease lapses this long after its last renewal
    max_stalls: int = 3  # docs/design.md: a fault stalls each claim it catches
    shutdown_grace_s: float = 30.0
    stop_grace_s: float = 10.0
    engine_wait_ms: int = 10 * 60_000  # how long a job waits for an unreachable Docker engine
    reconcile_s: float = 60.0  # how often the runner's runs are checked against live claims
    output_retention_s: float = 14 * 86_400.0  # captured output older than this is removed
    log_tail_bytes: int = 64 * 1024  # the newest output of a run kept in Redis (0: none)
    log_tail_ttl_s: float = 86_400.0  # a run's tail expires this long after its last write
    trigger_every_s: float = 5.0  # how often triggers are minted ahead (dispatch/triggers/)
    trigger_stall_max: int = 3  # infrastructure failures in a row that disable a trigger
    image: str = "dispatch-test:latest"
    job_memory: int = 4 * 1024**3  # default job size, bytes (a project's row comes first)
    job_cpus: float = 2.0
    host_memory: int | None = None  # this host's job budget; None: fixed concurrency only
    host_cpus: float | None = None
    metrics_addr: tuple[str, int] | None = None  # where /metrics is served; None: off
    on_failure: tuple[str, ...] = ()  # the operator's command told of jobs that ended wrong
    on_failure_timeout_s: float = 10.0
    webhook_url: str = ""  # POSTed the record of each job that ended wrong ("" = none)
    webhook_secret: str = ""  # signs those POSTs (HMAC-SHA256)
    web_token: str = ""  # `dispatch web`: signing in with it allows actions; "" = read-only
    # the docker runner's own (dispatch.runners.docker.settings.DockerSettings reads them here)
    allowed_roots: tuple[str, ...] = ()  # local folders must lie under one of these
    container_user: str | None = None  # None: the folder's owner, or nobody; "" = image's USER
    container_network: str | None = None  # None = job_network, behind the egress proxy
    job_network: str = "dispatch-jobs"  # the internal network dispatch creates and owns
    egress_port: int = 3128  # the proxy's port on the job network's gateway; 0 = any free one
    container_read_only: bool = True  # the opt-out is for images that write outside /tmp, HOME
    container_pids_limit: int = 512
    container_log_size: int | None = None  # per engine log file; None: the runner's default
    # the wait-for gate (gates/wait/gate.py); docs/operating/waiting.md
    wait_after_max_ms: int = 30 * 86_400_000  # an `after` further out is refused
    wait_check_slots: int = 1  # checks at once on this host (never the last job slot)
    wait_fleet_checks: int | None = None  # checks at once fleet-wide; None: unbounded
    wait_interval_ms: int = 60_000  # between checks of one job, before the backoff
    wait_max_ms: int = 86_400_000  # the longest a job holds on its checks
    wait_max_checks: int = 96
    wait_max_faults: int = 5  # checks in a row that could not tell

    @property
    def owned_network(self) -> str | None:
        """The job network when jobs run behind dispatch's egress proxy; None when the operator
        named another network (or `none`), which is then theirs to keep closed."""
        named = self.container_network
        return self.job_network if named is None or named == self.job_network else None

    @property
    def queues(self) -> list[str]:
        """The shared queue and this host's own (local folders live on one machine)."""
        return ["jobs", f"jobs@{self.host}"]


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Read the settings; raise ConfigError naming the first bad variable."""
    env = os.environ if env is None else env
    get = env.get
    state_dir = Path(get("DISPATCH_STATE_DIR") or default_state_dir())
    url = _redis_url(get("DISPATCH_REDIS_URL", ""))
    values: dict[str, object] = {
        "redis_url": url or f"unix://{state_dir / 'redis.sock'}",
        "embedded": not url,
        "state_dir": state_dir,
    }
    for name, key, parse in _FIELDS:
        raw = get(key)
        if raw is None or (raw == "" and key not in _EMPTY_IS_A_VALUE):
            continue
        try:
            values[name] = parse(raw)
        except (ValueError, ConfigError) as exc:
            said = "(hidden)" if key in _SECRET else shown(raw)
            raise ConfigError(f"{key}={said}: {exc}") from None
    settings = Settings(**values)  # type: ignore[arg-type]
    _check(settings)
    return settings


def _redis_url(raw: str) -> str:
    if raw:
        try:
            redis_target(raw)
        except ValueError as exc:  # the password stays out of the line: the reason only
            raise ConfigError(f"DISPATCH_REDIS_URL: {exc}") from None
    return raw


MIN_TOKEN = 16  # characters: a web token shorter than this is guessable


def _token(raw: str) -> str:
    token = raw.strip()
    if len(token) < MIN_TOKEN:
        raise ValueError(f"must be at least {MIN_TOKEN} characters")
    return token


def _token_file(raw: str) -> str:
    try:
        text = Path(raw).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot be read: {type(exc).__name__}") from None
    return _token(text)


_WHOLE = re.compile(r"\d{1,9}", re.ASCII)


def _whole(raw: str, floor: int, ceiling: int = 10**9 - 1) -> int:
    if not _WHOLE.fullmatch(raw) or not floor <= int(raw) <= ceiling:
        raise ValueError(f"must be a whole number from {floor} to {ceiling}")
    return int(raw)


def _positive_int(raw: str) -> int:
    return _whole(raw, 1)


def _host(raw: str) -> str:
    if not _HOST.match(raw):
        raise ValueError("host names use A-Z a-z 0-9 . _ - (at most 63)")
    return raw


def _runner(raw: str) -> RunnerName:
    if raw == "docker":
        return "docker"
    if raw == "process":
        return "process"
    raise ValueError("runner is docker or process")


_NAME = re.compile(r"[A-Za-z0-9_.:/@+-]{1,255}")  # prefixes, image refs, users, networks


def _name(raw: str) -> str:
    if not _NAME.fullmatch(raw):
        raise ValueError("use A-Z a-z 0-9 and _ . : / @ + - only (at most 255)")
    return raw


def _flag(raw: str) -> bool:
    word = raw.strip().lower()
    if word not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError("is not one of 1 true yes on / 0 false no off")
    return word in ("1", "true", "yes", "on")


def _url(raw: str) -> str:
    text = raw.strip()
    if text and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", text):
        raise ValueError("give an http:// or https:// URL")
    return text


def _argv(raw: str) -> tuple[str, ...]:
    """A command and its arguments, split as a shell would (never run by one); an absolute
    path first, so what runs does not depend on the daemon's PATH."""
    argv = tuple(shlex.split(raw))
    if argv and not os.path.isabs(argv[0]):
        raise ValueError(f"{argv[0]!r}: give the command's absolute path")
    return argv


def _address(raw: str) -> tuple[str, int] | None:
    """`host:port` for /metrics (`127.0.0.1:9464`); empty or `off` turns it off."""
    if raw.strip().lower() in ("", "off"):
        return None
    host, sep, port = raw.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("give host:port, e.g. 127.0.0.1:9464 (or off)")
    return host.strip("[]"), int(port)


def _roots(raw: str) -> tuple[str, ...]:
    roots = tuple(r for r in raw.split(os.pathsep) if r)
    if not all(os.path.isabs(r) for r in roots):
        raise ValueError(f"every root must be an absolute path (separated by {os.pathsep!r})")
    return roots


def _tail_bytes(raw: str) -> int:
    """0 (no tail in Redis) up to 8 MiB, the output file's own cap."""
    value = 0 if raw.strip() == "0" else parse_bytes(raw)
    if value > 8 * 1024**2:
        raise ValueError("the log tail is at most 8m (the output file's own cap)")
    return value


def _log_size(raw: str) -> int:
    """The engine's log file size: 3 files must hold the 8 MiB output cap (a re-adopted run
    re-reads its log from the start)."""
    size = parse_bytes(raw)
    if not 3 * 1024**2 <= size <= 1024**3:
        raise ValueError("use 3m or more (3 files must hold the 8 MiB output cap), at most 1g")
    return size


def _user(raw: str) -> str:
    return raw and _name(raw)  # "" = the image's own USER


_FIELDS: list[tuple[str, str, Callable[[str], object]]] = [
    ("config_dir", "DISPATCH_CONFIG_DIR", Path),
    ("prefix", "DISPATCH_PREFIX", _name),
    ("host", "DISPATCH_HOST", _host),
    ("concurrency", "DISPATCH_CONCURRENCY", lambda raw: _whole(raw, 1, 10_000)),
    ("runner", "DISPATCH_RUNNER", _runner),
    ("lock_ms", "DISPATCH_LOCK_MS", _positive_int),
    ("renew_s", "DISPATCH_RENEW_EVERY", parse_seconds),
    ("sweep_s", "DISPATCH_SWEEP_EVERY", parse_seconds),
    ("lease_ttl_s", "DISPATCH_LEASE_TTL", parse_seconds),
    ("max_stalls", "DISPATCH_MAX_STALLS", lambda raw: _whole(raw, 0, 1000)),
    ("shutdown_grace_s", "DISPATCH_SHUTDOWN_GRACE", parse_seconds),
    ("stop_grace_s", "DISPATCH_STOP_GRACE", parse_seconds),
    ("engine_wait_ms", "DISPATCH_ENGINE_WAIT_MAX", parse_duration_ms),
    ("reconcile_s", "DISPATCH_RECONCILE_EVERY", parse_seconds),
    ("output_retention_s", "DISPATCH_OUTPUT_RETENTION", parse_seconds),
    ("log_tail_bytes", "DISPATCH_LOG_TAIL", _tail_bytes),
    ("log_tail_ttl_s", "DISPATCH_LOG_TAIL_TTL", parse_seconds),
    ("trigger_every_s", "DISPATCH_TRIGGER_EVERY", parse_seconds),
    ("trigger_stall_max", "DISPATCH_TRIGGER_STALL_MAX", lambda raw: _whole(raw, 1, 1000)),
    ("image", "DISPATCH_IMAGE", _name),
    ("job_memory", "DISPATCH_JOB_MEMORY", parse_memory),
    ("job_cpus", "DISPATCH_JOB_CPUS", parse_cpus),
    ("host_memory", "DISPATCH_HOST_MEMORY", lambda raw: parse_memory(raw, MAX_HOST_MEMORY)),
    ("host_cpus", "DISPATCH_HOST_CPUS", lambda raw: parse_cpus(raw, MAX_HOST_CPUS)),
    ("allowed_roots", "DISPATCH_ALLOWED_ROOTS", _roots),
    ("metrics_addr", "DISPATCH_METRICS_ADDR", _address),
    ("on_failure", "DISPATCH_ON_FAILURE", _argv),
    ("on_failure_timeout_s", "DISPATCH_ON_FAILURE_TIMEOUT", parse_seconds),
    ("webhook_url", "DISPATCH_WEBHOOK_URL", _url),
    ("webhook_secret", "DISPATCH_WEBHOOK_SECRET", str),
    ("web_token", "DISPATCH_WEB_TOKEN", _token),
    ("web_token", "DISPATCH_WEB_TOKEN_FILE", _token_file),  # read last: the file wins
    ("container_user", "DISPATCH_CONTAINER_USER", _user),
    ("container_network", "DISPATCH_CONTAINER_NETWORK", _name),
    ("job_network", "DISPATCH_JOB_NETWORK", _name),
    ("egress_port", "DISPATCH_EGRESS_PORT", lambda raw: _whole(raw, 0, 65535)),
    ("container_read_only", "DISPATCH_CONTAINER_READ_ONLY", _flag),
    ("container_pids_limit", "DISPATCH_CONTAINER_PIDS_LIMIT", lambda r: _whole(r, 1, 4_194_304)),
    ("container_log_size", "DISPATCH_CONTAINER_LOG_SIZE", _log_size),
    ("wait_after_max_ms", "DISPATCH_WAIT_AFTER_MAX", parse_duration_ms),
    ("wait_check_slots", "DISPATCH_WAIT_CHECK_SLOTS", _positive_int),
    ("wait_fleet_checks", "DISPATCH_WAIT_FLEET_CHECKS", _positive_int),
    ("wait_interval_ms", "DISPATCH_WAIT_INTERVAL", parse_duration_ms),
    ("wait_max_ms", "DISPATCH_WAIT_MAX", parse_duration_ms),
    ("wait_max_checks", "DISPATCH_WAIT_MAX_CHECKS", _positive_int),
    ("wait_max_faults", "DISPATCH_WAIT_MAX_FAULTS", _positive_int),
]
_SECRET = {"DISPATCH_WEB_TOKEN"}  # a refusal never quotes its value
_EMPTY_IS_A_VALUE = {"DISPATCH_CONTAINER_USER"}  # elsewhere an empty value means the default


def _check(s: Settings) -> None:
    # the upper bounds are the Lua scripts' own (lua/README.md): past them every call is refused
    if not 3000 <= s.lock_ms <= 86_400_000:
        raise ConfigError("DISPATCH_LOCK_MS must be at least 3000 and at most 86400000 (24h)")
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
    if not 1 <= s.lease_ttl_s <= 86_400:
        raise ConfigError("DISPATCH_LEASE_TTL must be at least 1s and at most 24h")
    if not 0 <= s.max_stalls <= 1000:
        raise ConfigError("DISPATCH_MAX_STALLS must be 0 to 1000")
    if not 0.1 <= s.trigger_every_s <= 60:  # occurrences are minted this far ahead, times 3
        raise ConfigError("DISPATCH_TRIGGER_EVERY must be at least 100ms and at most 1m")
    if s.reconcile_s < 1:  # each round lists the engine's containers: not a busy loop
        raise ConfigError("DISPATCH_RECONCILE_EVERY must be at least 1s")
    # a run's file is new when the run starts: a retention longer than one pruning pass means
    # no file of a run that started during the pass is ever old enough to go
    if s.log_tail_ttl_s < 60:
        raise ConfigError("DISPATCH_LOG_TAIL_TTL must be at least 1m")
    if s.output_retention_s < 60:
        raise ConfigError("DISPATCH_OUTPUT_RETENTION must be at least 1m")
    _check_waits(s)


WAIT_INTERVAL_FLOOR_MS = 30_000  # a check every few seconds would be a poll, not a wait


def _check_waits(s: Settings) -> None:
    if s.wait_interval_ms < WAIT_INTERVAL_FLOOR_MS:
        raise ConfigError("DISPATCH_WAIT_INTERVAL must be at least 30s")
    if s.wait_max_ms < 1000 or s.wait_after_max_ms < 1000:
        raise ConfigError("DISPATCH_WAIT_MAX and DISPATCH_WAIT_AFTER_MAX must be at least 1s")
