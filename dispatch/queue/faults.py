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
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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
    """Raise any fault of the calls inside as RedisUnavailable (or RedisUnreachable)."""
    try:
        yield
    except REDIS_FAULTS as exc:
        raise translated(exc, what) from exc


def cause(exc: BaseException) -> str:
    """The type name of the fault at the root: `ReadOnlyError`, not `RedisUnavailable`."""
    root = exc.__cause__ if isinstance(exc, RedisUnavailable) and exc.__cause__ else exc
    return type(root).__name__
