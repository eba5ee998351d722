"""`dispatch drain HOST [--grace DURATION] [--wait]`: the host's daemon stops claiming, lets its
running jobs finish within the grace (then hands them back, spending no attempt) and exits 0
(dispatch/fleet/drain.py). `--wait` returns once it has exited, for a rolling upgrade:
drain, upgrade, start, next host."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from dispatch.cli import inputs
from dispatch.errors import DispatchError
from dispatch.model import iso
from dispatch.queue import keys

if TYPE_CHECKING:
    from dispatch.client import Client

DEFAULT_GRACE = "1h"  # agents' jobs run long: a drain lets them finish, unlike a plain stop
MAX_GRACE_S = 7 * 86_400.0
NOTICED_S = 5.0  # the daemon reads the request with its heartbeat
POLL_S = 0.5


def add_command(add: Callable[..., argparse.ArgumentParser], func: Callable[..., int]) -> None:
    p = add("drain", func, "a host stops claiming, finishes its jobs and exits (rolling upgrades)")
    p.add_argument("host")
    p.add_argument(
        "--grace", default=DEFAULT_GRACE, help=f"DURATION its jobs may take ({DEFAULT_GRACE})"
    )
    p.add_argument("--wait", action="store_true", help="return once its daemon has exited")


async def run(client: Client, host: str, grace: str, wait: bool) -> int:
    from dispatch.fleet import drain

    grace_s = inputs.duration("--grace", grace) / 1000
    if grace_s > MAX_GRACE_S:
        raise inputs.UsageError(f"--grace {grace}: at most 7d")
    started = await started_ms(client, host)
    if started is None:
        print(f"dispatch: host {host} is not running (no heartbeat)", file=sys.stderr)
        return 1
    at = iso(client.clock.now_ms()) or ""
    await drain.ask(client.redis, client.prefix, host, drain.DrainRequest(
        started_ms=started, grace_s=grace_s, at=at, by=client.host,
    ))  # fmt: skip
    if not wait:
        print(f"asked {host} to drain: it stops claiming within {NOTICED_S:g} s, then its jobs"
              f" have {grace} to finish")  # fmt: skip
        return 0
    return await _until_gone(client, host, started, NOTICED_S + grace_s + 90)


async def started_ms(client: Client, host: str) -> int | None:
    from dispatch.queue import heartbeats

    raw = await client.redis.get(keys.host_alive(host, client.prefix))
    beat = heartbeats.decode(raw.encode() if isinstance(raw, str) else raw)
    found = beat.get("started_ms") if beat else None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


async def _until_gone(client: Client, host: str, started: int, within_s: float) -> int:
    """Exited: its heartbeat is gone, or another daemon's (a start after the drain) beats."""
    import asyncio

    deadline = client.clock.monotonic() + within_s
    while client.clock.monotonic() < deadline:
        now = await started_ms(client, host)
        if now != started:
            print(f"{host} drained: its daemon exited")
            return 0
        await asyncio.sleep(POLL_S)
    raise DispatchError(f"{host} is still draining after {within_s:g} s")
