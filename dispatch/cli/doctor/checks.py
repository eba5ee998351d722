"""The doctor's host checks: Redis, its scripts, the engine and the image, the config files,
the wait profiles, the secret profiles and the trigger agreement (the list is in
dispatch/cli/doctor/__init__.py). `Check` is one line of the report.

A check that cannot run because an earlier one failed is left out rather than reported as
failed twice. A warning does not fail the doctor; `failed(checks)` says whether any check did.
The engine is found the usual way (`DOCKER_HOST`, else the standard socket).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.exceptions import RedisError

from dispatch.cli.budget import doctor_warnings
from dispatch.config.schemas import FILES, SecretProfile
from dispatch.config.settings import Settings
from dispatch.errors import ConfigError
from dispatch.queue.cluster import ClusterFault
from dispatch.queue.connect import is_cluster, open_redis
from dispatch.queue.keys import budget_keys, queue_keys
from dispatch.queue.scripts import all_scripts, load_all, lua_dir
from dispatch.queue.topology import describe
from dispatch.runners.docker import DockerClient, DockerError, ImageMissing

_MIN_REDIS = (7, 0)
_MIN_VALKEY = (7, 2)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    warn: bool = False


def failed(checks: list[Check]) -> bool:
    return any(not c.ok for c in checks)


def render(check: Check) -> str:
    mark = "FAIL" if not check.ok else ("warn" if check.warn else "ok")
    return f"{mark:<4}  {check.name:<16}  {check.detail}"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:2] if p.isdigit())


def _url_where(url: str) -> str:
    """host:port of a URL (never its password), or "unix socket"."""
    parsed = urlsplit(url.split(",")[0])
    if parsed.scheme == "unix":
        return "unix socket"
    return f"{parsed.hostname or '?'}:{parsed.port or 6379}"


def _where(redis: Redis) -> str:
    if is_cluster(redis):  # its start-up nodes are named host:port, never with the password
        seeds = redis.startup_nodes  # type: ignore[attr-defined]
        return "a Redis Cluster through " + ", ".join(n.name for n in seeds)
    kwargs = redis.connection_pool.connection_kwargs
    if "path" in kwargs:
        return "unix socket"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def version_check(info: dict[str, Any]) -> Check:
    if "valkey_version" in info:
        name, text, floor = "valkey", str(info["valkey_version"]), _MIN_VALKEY
    else:
        name, text, floor = "redis", str(info.get("redis_version", "0")), _MIN_REDIS
    ok = _version(text) >= floor
    need = "" if ok else f" (need >= {floor[0]}.{floor[1]})"
    return Check("redis-version", ok, f"{name} {text}{need}")


def policy_check(policy: str | None) -> Check:
    if policy is None:
        return Check("maxmemory-policy", True, "unreadable (CONFIG disabled?): check it", warn=True)
    if policy == "noeviction":
        return Check("maxmemory-policy", True, "noeviction")
    return Check("maxmemory-policy", True, f"{policy}: queue keys may be evicted", warn=True)


async def _policy(redis: Redis) -> str | None:
    try:
        answer: dict[Any, Any] = await redis.config_get("maxmemory-policy")
    except RedisError:
        return None
    value = answer.get("maxmemory-policy") or answer.get(b"maxmemory-policy")
    return value.decode() if isinstance(value, bytes) else str(value) if value else None


async def redis_checks(settings: Settings) -> list[Check]:
    try:
        redis = await open_redis(settings.redis_url, socket_timeout=5)
    except (RedisError, OSError) as exc:
        where = _url_where(settings.redis_url)
        return [Check("redis", False, f"{where} unreachable: {type(exc).__name__}")]
    try:
        try:
            await redis.ping()
            info = await redis.info("server")
        except ClusterFault as exc:  # a cluster that answers but cannot serve every key
            return [Check("redis-topology", False, str(exc).splitlines()[0])]
        except (RedisError, OSError) as exc:
            return [Check("redis", False, f"{_where(redis)} unreachable: {type(exc).__name__}")]
        checks = [Check("redis", True, f"reachable at {_where(redis)}"), version_check(info)]
        topology = await _topology_checks(redis, settings)
        checks += topology
        if failed(topology):
            return checks
        checks.append(policy_check(await _policy(redis)))
        checks.append(await _scripts_check(redis))
        return checks
    finally:
        await redis.aclose()


async def _topology_checks(redis: Redis, settings: Settings) -> list[Check]:
    """Standalone, or a cluster: its shape, what keeps it from serving every key (a failure),
    and the node each of this host's hash tags lives on."""
    tags = {name: queue_keys(name, settings.prefix).tag for name in settings.queues}
    tags["budget"] = budget_keys(settings.prefix).tag
    try:
        found = await describe(redis, tags.values())
    except (RedisError, OSError) as exc:
        return [Check("redis-topology", False, f"unreadable: {type(exc).__name__}: {exc}")]
    checks = [Check("redis-topology", True, found.words())]
    checks += [Check("redis-topology", False, trouble) for trouble in found.troubles]
    for name, tag in tags.items():
        if tag in found.tags:
            slot, node = found.tags[tag]
            words = f"{name}: slot {slot} on {node or 'no primary'}"
            checks.append(Check("redis-slot", node is not None, words))
    return checks


async def _scripts_check(redis: Redis) -> Check:
    try:
        await load_all(redis)
    except ConfigError as exc:
        return Check("scripts", False, str(exc))
    except (RedisError, OSError) as exc:
        return Check("scripts", False, f"load failed: {exc}")
    return Check("scripts", True, f"{len(all_scripts())} loaded from {lua_dir()}")


async def docker_checks(docker_host: str | None, image: str | None) -> list[Check]:
    async with DockerClient(docker_host, timeout_s=5) as client:
        try:
            api = await client.connect()
            engine = (await client.version()).get("Version", "?")
        except DockerError as exc:
            return [Check("docker", False, f"{client.host} unreachable: {exc}")]
        checks = [Check("docker", True, f"engine {engine}, API {api} at {client.host}")]
        checks.append(await _image_check(client, image))
        return checks


async def _image_check(client: DockerClient, image: str | None) -> Check:
    if not image:
        return Check("image", True, "no default image configured", warn=True)
    try:
        await client.image_inspect(image)
    except ImageMissing:
        return Check("image", False, f"{image} is not on this host (jobs never pull)")
    except DockerError as exc:
        return Check("image", False, f"{image}: {exc}")
    return Check("image", True, f"{image} present")


def config_checks(config_dir: Path) -> list[Check]:
    from dispatch.config.watcher import load_once

    snapshot = load_once(config_dir)
    checks = [Check("config", False, f"{name}: {why}") for name, why in snapshot.errors.items()]
    checks += [
        Check("config", False, f"{name}: written by a newer release; upgrade this host")
        for name in snapshot.newer
    ]
    if checks:
        return checks
    missing = sum(not (config_dir / name).exists() for name in FILES)
    found = [Check("config", True, f"{len(FILES)} files, {missing} missing")]
    warnings = [Check("spend-caps", True, w, warn=True) for w in doctor_warnings(snapshot)]
    return [*found, *warnings, *secret_checks(snapshot.secrets)]


def secret_checks(profiles: Mapping[str, SecretProfile]) -> list[Check]:
    from dispatch.secrets.checks import profile_checks

    return [Check("secret", ok, detail) for ok, detail in profile_checks(profiles)]


def profile_checks(config_dir: Path) -> list[Check]:
    """Each declared wait profile's command is there and executable (by this user)."""
    from dispatch.config.watcher import load_once
    from dispatch.gates.wait.profiles import command_problem

    checks = []
    for name, profile in sorted(load_once(config_dir).profiles.items()):
        problem = command_problem(profile)
        detail = f"{name}: {problem}" if problem else f"{name}: {profile.command[0]}"
        checks.append(Check("wait-profile", problem is None, detail))
    return checks


def roots_check(settings: Settings) -> list[Check]:
    """A warning when the docker runner may mount no folder at all: every local job would be
    refused (at submit, and at pickup for one that got in another way)."""
    if settings.runner != "docker" or settings.allowed_roots:
        return []
    hint = "local jobs are refused; set DISPATCH_ALLOWED_ROOTS or run dispatch up --allow DIR"
    return [Check("allowed-roots", True, f"no folder is allowed: {hint}", warn=True)]


async def run_checks(settings: Settings, docker_host: str | None = None) -> list[Check]:
    """Every check, Redis first, then Docker."""
    return [*await redis_checks(settings), *await docker_checks(docker_host, settings.image)]


async def trigger_checks(settings: Settings) -> list[Check]:
    from dispatch.config.watcher import load_once
    from dispatch.triggers.control import fleet_words

    try:
        redis = await open_redis(settings.redis_url, socket_timeout=5)
    except (RedisError, OSError):
        return []  # the redis line already says why
    try:
        found = await fleet_words(redis, settings, load_once(settings.config_dir))
    except (RedisError, OSError, ConfigError):
        return []  # the redis or config line already says why
    finally:
        await redis.aclose()
    return [Check("triggers", ok, words, warn) for ok, warn, words in found]


async def fleet_checks(settings: Settings) -> list[Check]:
    """From the live daemons' heartbeats: each one's clock (and this host's) against the
    server's TIME, and each run whose stop did not take."""
    from dispatch.clock import ServerTime, SystemClock
    from dispatch.queue.heartbeats import heartbeats

    try:
        redis = await open_redis(settings.redis_url, socket_timeout=5)
    except (RedisError, OSError):
        return []  # the redis line already says why
    try:
        beats = await heartbeats(redis, settings.prefix)
        here = ServerTime(SystemClock())
        await here.measure(redis)
    except (RedisError, OSError):
        return []  # the redis line already says why
    finally:
        await redis.aclose()
    return [_clocks(beats, settings.host, here.offset_ms or 0), *_stuck(beats)]


def _clocks(beats: dict[str, dict[str, Any]], host: str, mine: int) -> Check:
    from dispatch.fleet import skew

    offsets = skew.offsets_of(beats)
    offsets[host] = mine  # this host now, whatever its daemon said
    off = skew.skewed(offsets)
    if not off:
        return Check("clocks", True, f"{len(offsets)} host(s) within 2 s of Redis's TIME")
    hint = "run NTP there: its records and --after instants use its own clock"
    return Check("clocks", True, f"{skew.words(off)}; {hint}", warn=True)


def _stuck(beats: dict[str, dict[str, Any]]) -> list[Check]:
    from dispatch.cli.views import stuck_line

    return [
        Check("stop-not-taken", True, f"{s.get('job')}: {stuck_line(str(s.get('job')), host, s)}",
              warn=True)
        for host, beat in beats.items()
        for s in beat.get("stuck") or ()
        if isinstance(s, dict)
    ]  # fmt: skip
