"""What the Redis at DISPATCH_REDIS_URL is, in words an operator can check: a standalone server,
or a Redis Cluster with its primaries, their replicas, whether every slot is served, and which
node holds each of the hash tags dispatch uses.

A client opened by `queue.connect.open_redis` is already the right kind; `describe` reads the
cluster's slot map (the client's, from `CLUSTER SLOTS`) and asks every primary for its own
`CLUSTER INFO`, so that a cluster that cannot serve every key is reported, never called "ok". A
command that still meets a redirection (a slot that moved more often than the client follows)
is said in one line by the command line (`redirected`, `said`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from redis import exceptions as redis_errors

if TYPE_CHECKING:  # the command line imports this for `redirected` alone
    from redis.asyncio import Redis, RedisCluster

SLOTS = 16_384
_REDIRECTIONS = ("MOVED", "ASK", "CROSSSLOT", "CLUSTERDOWN", "TRYAGAIN")
_CLUSTER_ERRORS = (
    redis_errors.AskError,  # MovedError is one
    redis_errors.ClusterCrossSlotError,
    redis_errors.ClusterDownError,
    redis_errors.TryAgainError,
)


@dataclass
class Topology:
    cluster: bool
    primaries: list[str] = field(default_factory=list)  # host:port, sorted
    replicas: dict[str, int] = field(default_factory=dict)  # primary -> replicas serving it
    served: int = 0  # slots a primary serves
    troubles: list[str] = field(default_factory=list)  # each a reason it cannot serve
    tags: dict[str, tuple[int, str | None]] = field(default_factory=dict)  # tag -> slot, primary

    def words(self) -> str:
        if not self.cluster:
            return "standalone"
        counts = sorted(set(self.replicas.values()))
        if counts == [0]:
            each = "no replicas"
        elif len(counts) == 1:
            each = f"{counts[0]} replica(s) each"
        else:
            each = "replicas " + "/".join(str(self.replicas[p]) for p in self.primaries)
        served = f"{self.served} of {SLOTS} slots served"
        return f"Redis Cluster of {len(self.primaries)} primaries, {each}, {served}"


async def describe(redis: Redis, tags: Iterable[str] = ()) -> Topology:
    """The server's kind; for a cluster, its shape, its troubles and where each of `tags` lives."""
    from dispatch.queue.cluster import ClusterFault
    from dispatch.queue.connect import is_cluster

    if not is_cluster(redis):
        return Topology(cluster=False)
    cluster: RedisCluster = redis  # type: ignore[assignment]
    try:
        await cluster.initialize()
    except ClusterFault as exc:  # slots uncovered, no seed answering: no map is built
        return Topology(cluster=True, troubles=[str(exc).splitlines()[0]])
    manager = cluster.nodes_manager
    found = Topology(cluster=True, primaries=sorted(n.name for n in cluster.get_primaries()))
    owners: dict[str, set[str]] = {}
    for nodes in manager.slots_cache.values():
        if nodes:
            found.served += 1
            owners.setdefault(nodes[0].name, set()).update(n.name for n in nodes[1:])
    found.replicas = {p: len(owners.get(p, ())) for p in found.primaries}
    if found.served < SLOTS:
        found.troubles.append(f"{SLOTS - found.served} slots are served by no primary")
    found.troubles += await _node_troubles(cluster)
    for tag in tags:
        slot = cluster.keyslot(tag)
        nodes = manager.slots_cache.get(slot) or []
        found.tags[tag] = (slot, nodes[0].name if nodes else None)
    return found


async def _node_troubles(cluster: RedisCluster) -> list[str]:
    async def one(node: Any) -> str:
        try:
            info: dict[str, Any] = await cluster.execute_command("CLUSTER INFO", target_nodes=node)
        except (redis_errors.RedisError, OSError) as exc:
            return f"{node.name} does not answer: {type(exc).__name__}"
        state = str(info.get("cluster_state", "?"))
        assigned = info.get("cluster_slots_assigned", "?")
        return (
            ""
            if state == "ok"
            else f"{node.name} says cluster_state:{state} ({assigned} slots assigned)"
        )

    said = await asyncio.gather(*(one(n) for n in cluster.get_primaries()))
    return [s for s in said if s]


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


def said(exc: BaseException) -> str:
    """A redirection in one line: what the cluster answered, and where to look."""
    kind = type(exc).__name__.removesuffix("Error").upper()
    return (
        f"the Redis Cluster answered {kind} ({str(exc).splitlines()[0] if str(exc) else '-'})"
        " where dispatch could not follow it; dispatch doctor says what it serves"
    )
