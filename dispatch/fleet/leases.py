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
the lease guarded. If renewals keep failing until the lease's local deadline (measured from when
the last successful call was *sent*, so it never outlasts the server's expiry), that is a loss
too. The renewer never ends on an error and never cancels the task group it runs in (the
daemon's): a failed renewal is retried after `retry_s`, doubling up to the renewal interval, and
an error that is not a Redis fault (a bug) is logged `lease_renew_error` each time.

Faults (`dispatch.queue.faults`). Every call is bounded by `timeout_s`, and every fault, error
replies (READONLY, OOM, BUSY, LOADING, MASTERDOWN) included, becomes `RedisUnavailable`. An
acquire fails OPEN only when Redis is unreachable (`RedisUnreachable`: refused, reset, closed):
it returns a degraded lease (no fence) and the in-process slots still bound the host. A slow
Redis (the call timed out) or an error reply raises `RedisUnavailable` instead, as does an
unreachable one with `fail_open=False`: the caller defers. `lease_degraded` is logged once per
episode of faults, `lease_redis_recovered` when a call succeeds again.

An acquire that failed may have been granted all the same (it reached Redis, the reply did not
come back). A refused one is released best-effort later; failing that, its entry lapses by TTL.
A degraded one is asked after by its renewer (`lease_renew` on its holder id): if Redis holds
it, the grant is real and is renewed from then on like any other (`lease_confirmed`, still
without a fence). If Redis does not, the renewer takes it again (`lease_acquire` with `over`):
the run is under way, so its slot is taken even when all N are held, and Redis counts it, so no
host lets another job in until the count is below N again (`lease_retaken`, or
`lease_over_bound` naming how many hold it). From then on it is renewed like any grant. A lease
that failed open keeps `failed_open`, so the run's record says its start was not checked.

Holder ids are `<host>:<random>`, so after a restart `sweep_host` can release the claims the
previous process of this host left behind, found through the lease registry SET (added to once
per name per process: the registry sits in another hash slot than the lease, so a script cannot
touch both on a cluster).
"""

from __future__ import annotations

import contextlib
import math
import secrets
import socket
from collections.abc import Awaitable, Callable, Container, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup
from redis.asyncio import Redis

from dispatch.clock import Clock, SystemClock
from dispatch.errors import RedisUnavailable, RedisUnreachable
from dispatch.log import event
from dispatch.queue import keys as keyspace
from dispatch.queue.faults import redis_call
from dispatch.queue.scripts import Arg, checked, script

_T = TypeVar("_T")
_MAX_DOUBLINGS = 10  # of retry_s; the renewal interval caps the wait long before


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
    """One grant. A degraded grant (made without Redis's answer) has no fence, and `backed`
    says whether Redis holds it: None until its renewer has asked, then True or False."""

    keys: keyspace.LeaseKeys
    holder: str
    ttl_s: float
    fence: int | None
    deadline: float  # local monotonic seconds after which the server has surely expired it
    backed: bool | None = True
    slots: int = 1
    failed_open: bool = False  # granted without Redis's answer, whatever became of it since
    lost: anyio.Event = field(default_factory=anyio.Event)
    on_lost: Callable[[Lease], None] | None = None
    released: bool = False
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    @property
    def name(self) -> str:
        return self.keys.name

    @property
    def degraded(self) -> bool:
        return self.backed is not True


def holder_id(host: str) -> str:
    """A fresh holder id for this host; the random part never contains ':'."""
    return f"{host}:{secrets.token_hex(8)}"


def holder_host(holder: str) -> str:
    return holder.rpartition(":")[0]


async def _call(
    redis: Redis, name: str, keys: Sequence[str], args: Sequence[Arg], timeout_s: float
) -> Any:
    """Run one lease script within the timeout; every fault becomes RedisUnavailable."""
    with redis_call(name), anyio.fail_after(timeout_s):
        reply = await script(name)(redis, keys, args)
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
            args: list[Arg] = [holder, slots, _ms(ttl_s), 0]
            granted, value = await self._call("lease_acquire", [lk.holders, lk.fence], args)
        except RedisUnavailable as exc:
            return self._acquire_failed(lk, holder, slots, ttl_s, on_lost, exc)
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
        return self._hold(lease)

    def _hold(self, lease: Lease) -> Lease:
        self._held.add(lease)
        self._spawn(self._keep, lease)
        return lease

    def _acquire_failed(
        self,
        lk: keyspace.LeaseKeys,
        holder: str,
        slots: int,
        ttl_s: float,
        on_lost: Callable[[Lease], None] | None,
        exc: RedisUnavailable,
    ) -> Lease:
        # only an absent Redis may be stepped around: a slow or refusing one is still there
        if not (self.settings.fail_open and isinstance(exc, RedisUnreachable)):
            self._spawn(self._forget, lk, holder)
            raise exc
        # no deadline: a degraded grant is bounded by the in-process slots, not by Redis
        lease = Lease(
            keys=lk,
            holder=holder,
            ttl_s=ttl_s,
            fence=None,
            deadline=math.inf,
            backed=None,
            slots=slots,
            failed_open=True,
            on_lost=on_lost,
        )
        return self._hold(lease)

    async def renew(self, lease: Lease) -> bool:
        """Push the lease's expiry back once; False (and the lease is lost) if refused.

        Raises RedisUnavailable on a fault; the background renewer handles that itself. A
        degraded lease is never lost here: it is only asked after (`_confirm`), faults ignored.
        """
        if lease.released:
            return False
        if lease.degraded:
            with contextlib.suppress(RedisUnavailable):
                await self._confirm(lease)
            return True
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
        with redis_call("lease sweep"), anyio.fail_after(self.settings.timeout_s):
            leases = await known_leases(self.redis, self.settings.prefix)
        spare = {lease.holder for lease in self._held}
        return await sweep_host(self.redis, leases, self.host, spare=spare)

    async def _confirm(self, lease: Lease) -> None:
        """Ask whether a degraded grant's acquire reached Redis after all; if so, keep it, and
        if not, take it again, past the bound if need be: its run is already under way."""
        sent = self.clock.monotonic()
        args: list[Arg] = [lease.holder, _ms(lease.ttl_s)]
        if await self._call("lease_renew", [lease.keys.holders], args) == 1:
            lease.backed, lease.deadline = True, sent + lease.ttl_s
            event("lease_confirmed", lease=lease.name, holder=lease.holder)
            return
        keys = [lease.keys.holders, lease.keys.fence]
        args = [lease.holder, lease.slots, _ms(lease.ttl_s), 1]
        granted, fence = await self._call("lease_acquire", keys, args)
        lease.backed, lease.deadline, lease.fence = True, sent + lease.ttl_s, int(fence)
        if granted == 2:
            held = await self._holders(lease)
            event(
                "lease_over_bound",
                lease=lease.name,
                holder=lease.holder,
                held=held,
                slots=lease.slots,
            )
        else:
            event("lease_retaken", lease=lease.name, holder=lease.holder)

    async def _holders(self, lease: Lease) -> int | None:
        """How many hold the lease now (for the log line); None if Redis does not say."""
        with (
            contextlib.suppress(RedisUnavailable),
            redis_call("lease holders"),
            anyio.fail_after(self.settings.timeout_s),
        ):
            return int(await self.redis.zcard(lease.keys.holders))
        return None

    async def _keep(self, lease: Lease) -> None:
        """Renew until released or lost; it never raises, so it can never end the task group."""
        failures = 0
        with lease.scope:
            while not lease.lost.is_set():
                await anyio.sleep(self._next_renewal_s(lease, failures))
                failures = await self._renew_once(lease, failures)

    async def _renew_once(self, lease: Lease, failures: int) -> int:
        """One renewal (for a degraded lease, one question); how many have failed in a row."""
        try:
            if lease.degraded:
                await self._confirm(lease)
            else:
                await self.renew(lease)
        except Exception as exc:  # whatever it is, the renewer goes on: see the docstring
            self._renew_failed(lease, exc)
            return failures + 1
        return 0

    def _renew_failed(self, lease: Lease, exc: Exception) -> None:
        if not isinstance(exc, RedisUnavailable):  # a fault is logged once per episode
            event("lease_renew_error", lease=lease.name, error=f"{type(exc).__name__}: {exc}")
        if self.clock.monotonic() >= lease.deadline:
            self._lose(lease, _loss_reason(exc))

    def _next_renewal_s(self, lease: Lease, failures: int) -> float:
        # after a failure, retry sooner, backing off; never sleep past the local deadline
        interval = self.settings.renew_interval_s(lease.ttl_s)
        if failures:
            backoff = self.settings.retry_s * 2 ** min(failures - 1, _MAX_DOUBLINGS)
            interval = min(interval, backoff)
        return max(0.0, min(interval, lease.deadline - self.clock.monotonic()))

    def _lose(self, lease: Lease, reason: str) -> None:
        if lease.lost.is_set():
            return
        self._held.discard(lease)
        lease.lost.set()
        event("lease_lost", lease=lease.name, holder=lease.holder, reason=reason)
        if lease.on_lost is None:
            return
        try:
            lease.on_lost(lease)
        except Exception as exc:  # the owner's bug must not end the renewer
            event("lease_on_lost_failed", lease=lease.name, error=f"{type(exc).__name__}: {exc}")

    def _spawn(self, func: Callable[..., Awaitable[None]], *args: Any) -> None:
        if self._tg is None:
            raise RuntimeError("FleetLeases must be entered (async with) before acquiring")
        self._tg.start_soon(_supervised, func, *args)

    async def _forget(self, lk: keyspace.LeaseKeys, holder: str) -> None:
        # failing this too, the entry (if the acquire was granted at all) lapses by TTL
        with contextlib.suppress(RedisUnavailable):
            await self._call("lease_release", [lk.holders], [holder])

    async def _register(self, name: str) -> None:
        if name not in self._registered:
            await self._tracked(self._sadd(name))
            self._registered.add(name)

    async def _sadd(self, name: str) -> None:
        with redis_call("lease registry"), anyio.fail_after(self.settings.timeout_s):
            await self.redis.sadd(keyspace.leases_registry(self.settings.prefix), name)

    async def _call(self, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        return await self._tracked(_call(self.redis, name, keys, args, self.settings.timeout_s))

    async def _tracked(self, pending: Awaitable[_T]) -> _T:
        """Await a Redis call, logging once when an episode of faults starts and once it ends."""
        try:
            reply = await pending
        except RedisUnavailable as exc:
            if not self._degraded:
                self._degraded = True
                fails_open = self.settings.fail_open and isinstance(exc, RedisUnreachable)
                event("lease_degraded", error=str(exc), fail_open=fails_open)
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
    with redis_call("lease sweep"):
        for lk in keys:
            for holder in await holders(redis, lk):
                if holder_host(holder) == host and holder not in spare:
                    released += int(await script("lease_release")(redis, [lk.holders], [holder]))
    if released:
        event("lease_swept", host=host, released=released)
    return released


async def _supervised(func: Callable[..., Awaitable[None]], *args: Any) -> None:
    """A background task of the leases: an error is logged here and goes no further."""
    try:
        await func(*args)
    except Exception as exc:
        event("lease_task_failed", task=func.__name__, error=f"{type(exc).__name__}: {exc}")


def _loss_reason(exc: Exception) -> str:
    if isinstance(exc, RedisUnreachable):
        return "redis_unreachable"
    return "redis_unavailable" if isinstance(exc, RedisUnavailable) else "renew_error"


def _ms(seconds: float) -> int:
    """A TTL as the whole milliseconds the scripts take (at least 1)."""
    return max(1, round(seconds * 1000))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
