"""Which failures of a Redis call are faults, and which faults mean Redis is away.

A fault is whatever a call to Redis can raise that is not the caller's own bug: an error reply
(READONLY after a failover, OOM at maxmemory, BUSY while a script runs, LOADING after a
restart, MASTERDOWN on a replica cut from its master), a timeout, or a connection that failed.
None of them says anything about the job at hand, so none may fail it: callers defer, retry
or hand back.

Faults are told apart only where the difference changes what to do: `RedisUnreachable` when no
connection could be made or kept (refused, reset, closed under the call), the one case in which
a fleet lease may fail open (Redis is away, the host's own slots still bound it); every other
fault is `RedisUnavailable`. A server that answers late, or answers with an error, is there:
it is not asked to step aside.

Every `Queue` method raises its faults translated (`queue_call`, `QueueFault`), so the daemon
catches `RedisUnavailable` and nothing else for them; other Redis calls are translated where
they are made (`redis_call`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

from redis import exceptions as redis_errors

from dispatch.errors import RedisUnavailable, RedisUnreachable

# builtin TimeoutError (a deadline of ours) is an OSError too: both land here
REDIS_FAULTS = (redis_errors.RedisError, OSError)

# redis-py files these under ConnectionError, but a server sent them: it is there
_ANSWERED = (
    redis_errors.BusyLoadingError,  # LOADING
    redis_errors.AuthenticationError,
    redis_errors.AuthorizationError,
    redis_errors.MaxConnectionsError,  # our own pool is full; the server may be fine
)


def unreachable(exc: BaseException) -> bool:
    """True when the call failed for want of a connection, not for a late or refusing server."""
    if isinstance(exc, (TimeoutError, redis_errors.TimeoutError, *_ANSWERED)):
        return False
    return isinstance(exc, (redis_errors.ConnectionError, OSError))


def translated(exc: BaseException, what: str) -> RedisUnavailable:
    """The fault as this package's error; the message names the call and the foreign type."""
    kind = RedisUnreachable if unreachable(exc) else RedisUnavailable
    return kind(f"{what}: {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def redis_call(what: str) -> Iterator[None]:
    """Raise any fault of the calls inside as RedisUnavailable (or RedisUnreachable); one
    already translated (a `Queue` call's `QueueFault`) goes up as it is."""
    try:
        yield
    except RedisUnavailable:
        raise
    except REDIS_FAULTS as exc:
        raise translated(exc, what) from exc


class QueueFault(RedisUnavailable, redis_errors.RedisError):
    """A `Queue` call that failed (queue/transitions.py), its redis-py error as the cause.

    The daemon catches it as `RedisUnavailable`, the one type it catches for Redis. It is a
    `RedisError` too, so the callers outside the daemon that still name redis-py's type (the
    CLI's last resort in cli/commands.py, bench/soak.py's retry) keep their behaviour; once
    they catch `RedisUnavailable`, that second base can go."""


class QueueUnreachable(RedisUnreachable, QueueFault):
    """A `Queue` call that failed for want of a connection (see `unreachable`)."""


class queue_call:
    """Raise any fault of the calls inside as a QueueFault (or QueueUnreachable). One already
    translated (a `Queue` method calling another) goes up as it is; anything that is not a
    Redis fault (a script's error code: LockLost, BadCall, ...) too. A class, not a generator:
    it sits on the hot path, once per claim and per finish call."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> Literal[False]:
        if exc is None or isinstance(exc, RedisUnavailable) or not isinstance(exc, REDIS_FAULTS):
            return False
        fault = QueueUnreachable if unreachable(exc) else QueueFault
        raise fault(f"{self.what}: {type(exc).__name__}: {exc}") from exc


def cause(exc: BaseException) -> str:
    """The type name of the fault at the root: `ReadOnlyError`, not `RedisUnavailable`."""
    root = exc.__cause__ if isinstance(exc, RedisUnavailable) and exc.__cause__ else exc
    return type(root).__name__
