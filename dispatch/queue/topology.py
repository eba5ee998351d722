"""What the Redis at DISPATCH_REDIS_URL is: a standalone server, or a node of a Redis Cluster.

dispatch serves a standalone Redis (or Valkey) for now. A cluster node answers most commands
for keys of its own slots and MOVED (or ASK, CROSSSLOT) for the rest, so pointed at one a
command sometimes works and sometimes fails with a bare redirection: the doctor says what it
talks to, the daemon refuses to start on one (exit 2, the unit does not restart it), and the
command line turns a redirection into one line saying why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redis import exceptions as redis_errors

if TYPE_CHECKING:  # the command line imports this for `redirected` alone
    from redis.asyncio import Redis

_REDIRECTIONS = ("MOVED", "ASK", "CROSSSLOT", "CLUSTERDOWN", "TRYAGAIN")
_CLUSTER_ERRORS = (
    redis_errors.AskError,  # MovedError is one
    redis_errors.ClusterCrossSlotError,
    redis_errors.ClusterDownError,
    redis_errors.TryAgainError,
)
NOT_YET = (
    "DISPATCH_REDIS_URL names a node of a Redis Cluster{size}: dispatch serves a standalone"
    " Redis or Valkey only, for now (dispatch doctor)"
)


async def cluster_size(redis: Redis) -> int | None:
    """The cluster's primaries that own slots, or None for a standalone server."""
    info: dict[str, Any] = await redis.info("cluster")
    if str(info.get("cluster_enabled", "0")) != "1":
        return None
    fields: dict[str, Any] = await redis.cluster("INFO")  # redis-py parses it into a dict
    size = str(fields.get("cluster_size", "0")).strip()
    return int(size) if size.isdigit() else 0


def not_yet(size: int | None = None) -> str:
    return NOT_YET.format(size=f" ({size} primaries)" if size else "")


def redirected(exc: BaseException | None) -> bool:
    """Whether `exc`, or what caused it, is a cluster's redirection or refusal."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, _CLUSTER_ERRORS):
            return True
        if isinstance(exc, redis_errors.ResponseError) and str(exc).startswith(_REDIRECTIONS):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False
