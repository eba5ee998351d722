"""Fleet leases: a counting semaphore per name, shared by every host through Redis.

    async with FleetLeases(redis, LeaseSettings(), host="web-3") as leases:
        lease = await leases.acquire("gpu", slots=2, on_lost=stop_the_job)
        if lease is None:
            ...  # all slots held elsewhere: defer
        ...  # lease.fence goes with every write the holder makes elsewhere
        await leases.release(lease)

The state lives in `lua/lease_*.lua` (contract in `lua/README.md`): a ZSET of holder id -> expiry
in server milliseconds, plus a fencing counter. Acquire, renew and release are one round trip
each, atomic, and on the server's clock.

Holding. A grant lapses `ttl_s` after the call unless renewed; while the lease is held, a
background task renews it every `renew_every_s` (a third of the TTL by default, so two renewals
may fail before it lapses). A refused renewal means the slot is gone (expired and perhaps given
away): the lease's `lost` event is set and `on_lost` is called, and the owner must stop the work
the lease guarded. If Redis stays unreachable until the lease's local deadline (measured from when
the last successful call was *sent*, so it never outlasts the server's expiry), that is a loss too.

Faults. Every call is bounded by `timeout_s`. When Redis cannot be reached, an acquire fails OPEN
by default: it returns a degraded lease (no fence, not renewed) and logs `lease_degraded` once per
episode until a call succeeds again; the in-process slots still bound the host. With
`fail_open=False` it raises `RedisUnavailable` instead. A timed-out acquire may have been granted
anyway, so the holder id is released best-effort later; failing that, its entry lapses by TTL.

Holder ids are `<host>:<random>`, so after a restart `sweep_host` can release the claims the
previous process of this host left behind, found through the lease registry SET (added to once
per name per process: the registry sits in another hash slot than the lease, so a script cannot
touch both on a cluster).
"""

from __future__ import annotations

import contextlib
import secrets
import socket
from collections.abc import Awaitable, Callable, Container, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup
from redis import exceptions as redis_errors
from redis.asyncio import Redis

from dispatch.clock import Clock, SystemClock
from dispatch.errors import RedisUnavailable
from dispatch.log import event
from dispatch.queue import keys as keyspace
from dispatch.queue.scripts import Arg, checked, script

_T = TypeVar("_T")
_FAULTS = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError, TimeoutError)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseSettings:
    ttl_s: float = 30.0
    renew_every_s: float | None = None  # None: a third of the TTL
    timeout_s: float = 2.0  # bound on every Redis call
    retry_s: float = 0.5  # pause between renewals that met a fault
    fail_open: bool = True
    prefix: str = keyspace.DEFAULT_PREFIX

    def renew_interval_s(self, ttl_s: float) -> float:
        return self.renew_every_s if self.renew_every_s is not None else ttl_s / 3


@dataclass(eq=False, slots=True, kw_only=True)
class Lease:
    """One grant. `fence` is None only for a degraded (fail-open) grant."""

    keys: keyspace.LeaseKeys
    holder: str
    ttl_s: float
    fence: int | None
    deadline: float  # local monotonic seconds after which the server has surely expired it
    lost: anyio.Event = field(default_factory=anyio.Event)
    on_lost: Callable[[Lease], None] | None = None
    released: bool = False
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    @property
    def name(self) -> str:
        return self.keys.name

    @property
    def degraded(self) -> bool:
        return self.fence is None


def holder_id(host: str) -> str:
    """A fresh holder id for this host; the random part never contains ':'."""
    return f"{host}:{secrets.token_hex(8)}"


def holder_host(holder: str) -> str:
    return holder.rpartition(":")[0]


async def _call(
    redis: Redis, name: str, keys: Sequence[str], args: Sequence[Arg], timeout_s: float
) -> Any:
    """Run one lease script within the timeout; foreign faults become RedisUnavailable."""
    try:
        with anyio.fail_after(timeout_s):
            reply = await script(name)(redis, keys, args)
    except _FAULTS as exc:
        raise RedisUnavailable(f"{name}: {exc!r}") from exc
    return checked(reply, name)


class FleetLeases:
    """Acquires, keeps and releases fleet leases for one process; use as `async with`."""

    def __init__(
        self,
        redis: Redis,
        settings: LeaseSettings | None = None,
        *,
        host: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.redis = redis
        self.settings = settings or LeaseSettings()
        self.host = host or socket.gethostname()
        self.clock: Clock = clock or SystemClock()
        self._held: set[Lease] = set()
        self._registered: set[str] = set()
        self._degraded = False
        self._tg: TaskGroup | None = None

    async def __aenter__(self) -> FleetLeases:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        # leaving stops renewals only; held leases lapse by TTL unless released first
        self._tg.cancel_scope.cancel()
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            self._tg = None

    def held(self) -> list[Lease]:
        return list(self._held)

    async def acquire(
        self,
        name: str,
        slots: int,
        *,
        ttl_s: float | None = None,
        on_lost: Callable[[Lease], None] | None = None,
    ) -> Lease | None:
        """One of `slots` holds of `name`, renewed in the background; None when all are held."""
        if slots < 1:
            raise ValueError(f"lease slots must be >= 1, got {slots}")
        ttl_s = ttl_s or self.settings.ttl_s
        lk = keyspace.lease_keys(name, self.settings.prefix)
        holder = holder_id(self.host)
        sent = self.clock.monotonic()
        try:
            await self._register(name)
            args: list[Arg] = [holder, slots, _ms(ttl_s)]
            granted, value = await self._call("lease_acquire", [lk.holders, lk.fence], args)
        except RedisUnavailable as exc:
            return self._acquire_failed(lk, holder, ttl_s, on_lost, exc)
        if not granted:
            return None
        lease = Lease(
            keys=lk,
            holder=holder,
            ttl_s=ttl_s,
            fence=int(value),
            deadline=sent + ttl_s,
            on_lost=on_lost,
        )
        self._held.add(lease)
        self._spawn(self._keep, lease)
        return lease

    def _acquire_failed(
        self,
        lk: keyspace.LeaseKeys,
        holder: str,
        ttl_s: float,
        on_lost: Callable[[Lease], None] | None,
        exc: RedisUnavailable,
    ) -> Lease:
        if not self.settings.fail_open:
            self._spawn(self._forget, lk, holder)
            raise exc
        # no deadline: a degraded grant is bounded by the in-process slots, not by Redis
        lease = Lease(
            keys=lk, holder=holder, ttl_s=ttl_s, fence=None, deadline=float("inf"), on_lost=on_lost
        )
        self._held.add(lease)
        return lease

    async def renew(self, lease: Lease) -> bool:
        """Push the lease's expiry back once; False (and the lease is lost) if refused.

        Raises RedisUnavailable on a fault; the background renewer handles that itself.
        """
        if lease.released or lease.degraded:
            return not lease.released
        sent = self.clock.monotonic()
        args: list[Arg] = [lease.holder, _ms(lease.ttl_s)]
        if await self._call("lease_renew", [lease.keys.holders], args) == 1:
            lease.deadline = sent + lease.ttl_s
            return True
        self._lose(lease, "renewal_refused")
        return False

    async def release(self, lease: Lease) -> bool:
        """Give the slot back; False if it was already given back, lost, or Redis failed."""
        if lease.released:
            return False
        lease.released = True
        lease.scope.cancel()
        self._held.discard(lease)
        try:
            reply = await self._call("lease_release", [lease.keys.holders], [lease.holder])
        except RedisUnavailable as exc:
            if not lease.degraded:
                event("lease_release_failed", lease=lease.name, holder=lease.holder, error=str(exc))
            return False
        return bool(reply == 1)

    async def sweep(self) -> int:
        """Release this host's holders left by an earlier process (those this one holds stay)."""
        try:
            with anyio.fail_after(self.settings.timeout_s):
                leases = await known_leases(self.redis, self.settings.prefix)
        except _FAULTS as exc:
            raise RedisUnavailable(f"lease sweep: {exc!r}") from exc
        spare = {lease.holder for lease in self._held}
        return await sweep_host(self.redis, leases, self.host, spare=spare)

    async def _keep(self, lease: Lease) -> None:
        with lease.scope:
            while not lease.lost.is_set():
                await anyio.sleep(self._next_renewal_s(lease))
                try:
                    await self.renew(lease)
                except RedisUnavailable:
                    if self.clock.monotonic() >= lease.deadline:
                        self._lose(lease, "redis_unreachable")

    def _next_renewal_s(self, lease: Lease) -> float:
        # after a fault, retry sooner, but never sleep past the local deadline
        interval = self.settings.renew_interval_s(lease.ttl_s)
        since_ok = self.clock.monotonic() - (lease.deadline - lease.ttl_s)
        if since_ok > interval:
            interval = self.settings.retry_s
        return max(0.0, min(interval, lease.deadline - self.clock.monotonic()))

    def _lose(self, lease: Lease, reason: str) -> None:
        if lease.lost.is_set():
            return
        self._held.discard(lease)
        lease.lost.set()
        event("lease_lost", lease=lease.name, holder=lease.holder, reason=reason)
        if lease.on_lost is not None:
            lease.on_lost(lease)

    def _spawn(self, func: Callable[..., Any], *args: Any) -> None:
        if self._tg is None:
            raise RuntimeError("FleetLeases must be entered (async with) before acquiring")
        self._tg.start_soon(func, *args)

    async def _forget(self, lk: keyspace.LeaseKeys, holder: str) -> None:
        # failing this too, the entry (if the acquire was granted at all) lapses by TTL
        with contextlib.suppress(RedisUnavailable):
            await self._call("lease_release", [lk.holders], [holder])

    async def _register(self, name: str) -> None:
        if name not in self._registered:
            await self._tracked(self._sadd(name))
            self._registered.add(name)

    async def _sadd(self, name: str) -> None:
        try:
            with anyio.fail_after(self.settings.timeout_s):
                await self.redis.sadd(keyspace.leases_registry(self.settings.prefix), name)
        except _FAULTS as exc:
            raise RedisUnavailable(f"lease registry: {exc!r}") from exc

    async def _call(self, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        return await self._tracked(_call(self.redis, name, keys, args, self.settings.timeout_s))

    async def _tracked(self, pending: Awaitable[_T]) -> _T:
        """Await a Redis call, logging once when an episode of faults starts and once it ends."""
        try:
            reply = await pending
        except RedisUnavailable as exc:
            if not self._degraded:
                self._degraded = True
                event("lease_degraded", error=str(exc), fail_open=self.settings.fail_open)
            raise
        if self._degraded:
            self._degraded = False
            event("lease_redis_recovered")
        return reply


async def known_leases(
    redis: Redis, prefix: str = keyspace.DEFAULT_PREFIX
) -> list[keyspace.LeaseKeys]:
    """Every lease ever acquired under `prefix`, from the registry SET."""
    names = await redis.smembers(keyspace.leases_registry(prefix))
    return [keyspace.lease_keys(_text(n), prefix) for n in names]


async def holders(redis: Redis, lk: keyspace.LeaseKeys) -> dict[str, int]:
    """Live holders of one lease: holder id -> expiry (server ms)."""
    pairs = checked(await script("lease_holders")(redis, [lk.holders], []), "lease_holders")[1:]
    return {_text(pairs[i]): int(pairs[i + 1]) for i in range(0, len(pairs), 2)}


async def sweep_host(
    redis: Redis,
    keys: Iterable[keyspace.LeaseKeys],
    host: str,
    *,
    spare: Container[str] = frozenset(),
) -> int:
    """Release every live holder of `host` in the given leases, except `spare`; how many went.

    Each release names its exact holder id, so a sweep never frees another host's slot.
    """
    released = 0
    try:
        for lk in keys:
            for holder in await holders(redis, lk):
                if holder_host(holder) == host and holder not in spare:
                    released += int(await script("lease_release")(redis, [lk.holders], [holder]))
    except _FAULTS as exc:
        raise RedisUnavailable(f"lease sweep: {exc!r}") from exc
    if released:
        event("lease_swept", host=host, released=released)
    return released


def _ms(seconds: float) -> int:
    """A TTL as the whole milliseconds the scripts take (at least 1)."""
    return max(1, round(seconds * 1000))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
