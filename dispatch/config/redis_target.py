"""What DISPATCH_REDIS_URL names: one server, or the seed nodes of a Redis Cluster.

One URL (`redis://`, `rediss://`, `unix://`) names a server; whether it is a standalone
server or a node of a cluster is asked of it when a client opens (queue/connect.py). A cluster
may be said outright: a `redis+cluster://` (or `rediss+cluster://`) URL, or several seeds
separated by commas, so that a start finds the cluster while one seed is down. A seed after
the first may be a whole URL of the same scheme or a bare `host:port`, which takes the first
URL's user, password, database and options.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit, urlunsplit

from dispatch.config.units import shown

_PLAIN = ("redis", "rediss", "unix")
_CLUSTER = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


@dataclass(frozen=True, slots=True)
class RedisTarget:
    urls: tuple[str, ...]  # plain redis:// or rediss:// (or one unix://) URLs, seeds in order
    cluster: bool  # said so by the URL; False means: ask the server


def redis_target(raw: str) -> RedisTarget:
    """The target, or ValueError saying in a few words what is wrong with `raw`."""
    parts = [p.strip() for p in raw.split(",")]
    if any(not p for p in parts):
        raise ValueError("an empty seed between commas")
    first = urlsplit(parts[0])
    scheme = _CLUSTER.get(first.scheme, first.scheme)
    if scheme not in _PLAIN:
        raise ValueError("use redis://, rediss://, unix:// or redis+cluster://")
    cluster = first.scheme in _CLUSTER or len(parts) > 1
    if scheme == "unix":
        if cluster:
            raise ValueError("a cluster is reached over TCP: unix:// names one server")
        return RedisTarget((parts[0],), False)
    head = first._replace(scheme=scheme)
    urls = [_checked(urlunsplit(head))]
    for seed in parts[1:]:
        urls.append(_checked(_seed_url(seed, head)))
    return RedisTarget(tuple(urls), cluster)


def _seed_url(seed: str, head: SplitResult) -> str:
    if "://" in seed:
        given = urlsplit(seed)
        if _CLUSTER.get(given.scheme, given.scheme) != head.scheme:
            raise ValueError("every seed must use the first one's scheme")
        return urlunsplit(given._replace(scheme=head.scheme))
    userinfo = head.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{seed}" if userinfo else seed
    return urlunsplit(head._replace(netloc=netloc))


def _checked(url: str) -> str:
    parsed = urlsplit(url)
    where = parsed.netloc.rpartition("@")[2]  # the password stays out of the reason
    try:
        port = parsed.port
    except ValueError:
        port = 0
    if not parsed.hostname:
        raise ValueError(f"a seed names no host: {shown(where)}")
    if port is not None and not 0 < port < 65_536:
        raise ValueError(f"a seed's port is not a number from 1 to 65535: {shown(where)}")
    return url
