"""One daemon per host name and per state dir.

Two daemons under one host name would each take every claim `<host>:<n>` for its own: the one
that boots second would hand back (and for Docker remove the containers of) the jobs the first
one runs. Two on one state dir would share its run log, its output files and its embedded
Redis. So a daemon holds two things for its whole life, and a second one refuses to start with
one line naming the holder (exit 1, an `InstanceTaken`):

State dir: an exclusive `flock` on `<state dir>/daemon.lock`, taken before anything else (before
`dispatch up` starts its embedded Redis). The kernel drops it when the process ends, however it
ends, so it never needs cleaning up; the file says who holds it, for the refusal line. Its file
descriptor is not inherited by children (jobs, the embedded redis-server).

Host name: the Redis key `<prefix>:host:<host>:owner` (`lua/host_take.lua`), set only when free,
with the claim lock's TTL (`DISPATCH_LOCK_MS`), renewed every third of it while its value is
still this process's, and deleted on the way out (`lua/host_release.lua`). The value names the
process (pid, machine, state dir, start, a random nonce) and its place: machine, kernel boot
and the lock file's inode.

After a crash the key outlives its daemon for up to the TTL. A successor holding the flock of
the same lock file under the same running kernel knows the key's holder is dead (that holder
held this very flock), so it takes the key over at once: a restart is never refused. A
successor anywhere else (another machine, another state dir) waits for the TTL, and its refusal
line says so.

Taken over: a daemon that finds its key held by another process at a renewal (it was frozen or
cut off from Redis past the TTL, and another daemon started under its name and handed back its
claims) does not run beside it. It stops claiming, aborts its runs as a shutdown does (their
jobs wait again, spending no attempt) and exits 1 naming the new holder. A renewal that cannot
reach Redis decides nothing and is tried again after a second; a key found gone (it lapsed while
Redis was away and nobody took it) is taken again.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
from redis.asyncio import Redis

from dispatch.config.settings import Settings
from dispatch.daemon.tasks import set_within
from dispatch.errors import ConfigError, InstanceTaken, RedisUnavailable
from dispatch.log import event
from dispatch.queue.faults import redis_call
from dispatch.queue.keys import host_keys
from dispatch.queue.scripts import Arg, checked, script

LOCK_FILE = "daemon.lock"
RETRY_S = 1.0  # after a renewal that could not reach Redis
RENEWED, TAKEN, HELD = 1, 2, 0  # host_take's answers


class Holder(msgspec.Struct, frozen=True, kw_only=True):
    """Who holds a state dir or a host name, as its lock file and owner key say."""

    pid: int
    machine: str
    host: str
    state_dir: str
    since: str
    place: str = ""  # machine, kernel boot, lock file inode: one place is one flock
    nonce: str = ""

    def describe(self) -> str:
        return f"pid {self.pid} on {self.machine}, state dir {self.state_dir}, since {self.since}"


_decoder = msgspec.json.Decoder(Holder)


def _decode(raw: bytes | str | None) -> Holder | None:
    try:
        return _decoder.decode(raw) if raw else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@contextlib.contextmanager
def hold_instance(settings: Settings) -> Iterator[Holder]:
    """Hold the state dir and, for the docker runner, the host name on this machine's engine."""
    with contextlib.ExitStack() as held:
        holder = held.enter_context(hold_state_dir(settings.state_dir, settings.host))
        if settings.runner == "docker":
            from dispatch.runners.docker import resolve_host

            held.enter_context(hold_engine_name(resolve_host(), settings.host))
        yield holder


@contextlib.contextmanager
def hold_state_dir(state_dir: Path, host: str) -> Iterator[Holder]:
    """Hold the state dir's lock for the block; raise InstanceTaken when another process has it."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConfigError(f"DISPATCH_STATE_DIR {state_dir}: {exc.strerror or exc}") from None
    try:
        holder = _lock(fd, state_dir, host)
        yield holder
    finally:
        os.close(fd)  # drops the flock; the file stays, so no successor races a new inode


def _lock(fd: int, state_dir: Path, host: str) -> Holder:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        found = _decode(os.pread(fd, 4096, 0))
        who = f"{found.describe()}, host name {found.host}" if found else "unknown"
        raise InstanceTaken(
            f"state dir {state_dir} is in use by another daemon ({who});"
            " stop it first, or give this one its own DISPATCH_STATE_DIR"
        ) from None
    except OSError as exc:  # a file system without locks: one daemon per dir cannot be kept
        raise ConfigError(f"DISPATCH_STATE_DIR {state_dir}: cannot lock: {exc.strerror}") from None
    st = os.fstat(fd)
    machine = socket.gethostname()
    holder = Holder(
        pid=os.getpid(),
        machine=machine,
        host=host,
        state_dir=str(state_dir.resolve()),
        since=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        place=f"{machine}:{_boot_id()}:{st.st_dev}:{st.st_ino}",
    )
    try:  # who holds it, for a second daemon's refusal; the flock alone is the lock
        os.ftruncate(fd, 0)
        os.pwrite(fd, msgspec.json.encode(holder) + b"\n", 0)
    except OSError as exc:  # a full disk must not keep the daemon from starting
        event("state_lock_note_failed", error=exc.strerror or str(exc))
    return holder


@contextlib.contextmanager
def hold_engine_name(engine: str, host: str) -> Iterator[None]:
    """Hold (engine, host name) on this machine: an abstract unix socket, which any user can
    bind, only one process at a time, and which the kernel frees when the process ends.

    Without it, a daemon on another Redis (an operator's `dispatch up` with its embedded
    Redis, beside the service) would find no live claim for the service's containers on the
    shared engine and reap them all. Where abstract sockets do not exist it guards nothing."""
    sock = _bind_engine_name(engine, host)
    try:
        yield
    finally:
        if sock is not None:
            sock.close()


def _bind_engine_name(engine: str, host: str) -> socket.socket | None:
    name = "\0dispatch-" + hashlib.sha256(f"{engine}\n{host}".encode()).hexdigest()[:32]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(name)
        sock.listen(8)  # lets a refused daemon ask the kernel who holds it (SO_PEERCRED)
        return sock
    except OSError as exc:
        sock.close()
        if exc.errno != errno.EADDRINUSE:
            event("engine_name_unguarded", error=str(exc))
            return None
    raise InstanceTaken(
        f"host name {host} already runs a daemon on this machine's Docker engine {engine}"
        f" (pid {_peer_pid(name) or 'unknown'}); stop it first, or give this one another"
        " DISPATCH_HOST"
    )


def _peer_pid(name: str) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(name)
            creds = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return 0
    return int(struct.unpack("3i", creds)[0])


class HostOwner:
    """This process's hold on its host name in Redis: take, keep, release."""

    def __init__(self, redis: Redis, settings: Settings, holder: Holder) -> None:
        self.redis = redis
        self.host = settings.host
        self.key = host_keys(settings.host, settings.prefix).owner
        self.ttl_ms = settings.lock_ms
        self.me = msgspec.structs.replace(holder, nonce=secrets.token_hex(8))
        self.value = msgspec.json.encode(self.me)
        self.lost = False  # another process took the name over
        self.taker: Holder | None = None  # who, when its value could be read

    async def take(self) -> None:
        """Hold the host name, or raise InstanceTaken naming the process that does."""
        stale = await self._stale()
        code, raw = await self._call(stale)
        if code == HELD:
            raise await self._refusal(raw)
        if stale:
            event("host_taken_from_dead", host=self.host, was=_decode(stale))

    async def _refusal(self, raw: bytes) -> InstanceTaken:
        found = _decode(raw)
        who = found.describe() if found else "unknown"
        left_s = max(await self.redis.pttl(self.key), 0) / 1000
        return InstanceTaken(
            f"host name {self.host} is held by another daemon ({who}); stop it first, or give"
            f" this one another DISPATCH_HOST (if that daemon is dead, its hold lapses within"
            f" {left_s:.0f}s)"
        )

    async def _stale(self) -> bytes:
        """The key's value when a dead process of this very place left it: we hold its flock."""
        raw = await self.redis.get(self.key)
        found = _decode(raw)
        if raw and found and found.place == self.me.place:
            return raw.encode() if isinstance(raw, str) else raw
        return b""

    async def _call(self, stale: bytes) -> tuple[int, bytes]:
        args: list[Arg] = [self.value, self.ttl_ms, stale]
        code, raw = checked(await script("host_take")(self.redis, [self.key], args), "host take")
        return int(code), raw

    async def keep(self, until: asyncio.Event, on_lost: Callable[[], object]) -> None:
        """Renew every third of the TTL until `until` is set; on loss, call `on_lost` and end."""
        period = self.ttl_ms / 3000
        while not await set_within(until, period):
            try:
                with redis_call("host name renewal"):
                    code, raw = await self._call(b"")
            except RedisUnavailable as exc:
                event("host_owner_unrenewed", host=self.host, error=str(exc))
                period = RETRY_S
                continue
            period = self.ttl_ms / 3000
            if code == TAKEN:
                event("host_owner_retaken", host=self.host)  # lapsed, and nobody took it
            elif code == HELD:
                self.lost, self.taker = True, _decode(raw)
                event("host_taken_over", host=self.host, by=self.taker)
                on_lost()
                return

    async def release(self) -> None:
        """Give the name up if it is still ours; a fault leaves it to lapse by its TTL."""
        with contextlib.suppress(RedisUnavailable), redis_call("host name release"):
            await script("host_release")(self.redis, [self.key], [self.value])

    def taken_over(self) -> InstanceTaken:
        who = self.taker.describe() if self.taker else "unknown"
        return InstanceTaken(
            f"host name {self.host} was taken over by another daemon ({who});"
            " this one stopped its runs and exited"
        )
