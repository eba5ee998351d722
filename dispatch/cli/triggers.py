"""`dispatch triggers` and `dispatch trigger run|pause|resume ID`.

The triggers are this host's triggers.json (its last good copy is all a CLI process has: a
broken file is reported, exit 2); their state is the fleet's, in Redis. The agreement line
compares this host's fingerprint with every live daemon's heartbeat; a `clocks:` line names
each live host whose clock is more than 2 s off Redis's (dispatch/fleet/skew.py).
"""

from __future__ import annotations

import argparse
import json

from dispatch.cli import views
from dispatch.client import Client, JobView
from dispatch.config.settings import Settings
from dispatch.config.watcher import load_once
from dispatch.errors import ConfigError
from dispatch.fleet import skew
from dispatch.model import RunRecord, iso
from dispatch.queue import keys
from dispatch.triggers import control
from dispatch.triggers.agreement import agreement
from dispatch.triggers.spec import Compiled, compile_all, fingerprint, origin
from dispatch.triggers.store import TriggerStore


def configured(settings: Settings) -> tuple[list[Compiled], str]:
    snapshot = load_once(settings.config_dir)
    broken = snapshot.errors.get("triggers.json")
    if broken:
        raise ConfigError(f"triggers.json: {broken}")
    return compile_all(snapshot.triggers), fingerprint(snapshot.triggers)


async def why(client: Client, found: JobView, runs: list[RunRecord], as_json: bool) -> str:
    """`dispatch why`: the job's story, and the trigger that minted it, if one did."""
    minted = await origin_of(client, found)
    stuck = await client.stuck_stop(found)
    if as_json:
        return json.dumps(json.loads(views.why_json(found, runs, stuck)) | {"trigger": minted})
    return "\n".join([views.why_text(found, runs, stuck), *why_lines(minted)])


async def origin_of(client: Client, view: JobView) -> dict[str, object] | None:
    """The trigger and occurrence a job was minted for, from its document's dedup key."""
    raw = await client.redis.hget(keys.queue_keys(view.queue, client.prefix).data, view.id)
    found = origin(raw)
    if found is None:
        return None
    return {"trigger": found.trigger, "at": iso(found.at_ms), "manual": found.manual}


def why_lines(found: dict[str, object] | None) -> list[str]:
    if found is None:
        return []
    if found["manual"]:
        return [f"It was minted by trigger {found['trigger']} (trigger run at {found['at']})."]
    return [f"It was minted by trigger {found['trigger']} for its occurrence at {found['at']}."]


def _one(settings: Settings, tid: str) -> Compiled:
    found = next((c for c in configured(settings)[0] if c.id == tid), None)
    if found is None:
        raise ConfigError(f"no trigger {tid!r} in {settings.config_dir / 'triggers.json'}")
    return found


async def show(client: Client, settings: Settings, as_json: bool) -> int:
    triggers, mine = configured(settings)
    store = TriggerStore(client.redis, client.prefix)
    now = client.clock.now_ms()
    rows = await control.rows(store, triggers, now)
    agreed = await agreement(client.redis, client.prefix, settings.host, mine)
    off = skew.skewed(await skew.published_offsets(client.redis, client.prefix))
    if as_json:
        found = {"agreement": agreed.as_json(), "triggers": rows, "skewed_clocks_ms": off}
        print(json.dumps(found))
    else:
        print(control.table(rows, agreed))
        if off:
            print(f"clocks: {skew.words(off)} (rounds are judged by Redis's TIME)")
    return 0


async def act(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    c = _one(settings, args.id)
    store = TriggerStore(client.redis, client.prefix)
    now = client.clock.now_ms()
    if args.action == "run":
        print(await control.run_now(store, c, now))
    elif args.action == "pause":
        withdrawn = await control.pause(store, c.id, now, settings.host)
        print(f"paused trigger {c.id} fleet-wide ({withdrawn} pending occurrence(s) withdrawn)")
    else:
        await control.resume(store, c.id, now)
        print(f"resumed trigger {c.id}: the next round mints its next occurrence")
    return 0
