"""The operator's side: `dispatch triggers` rows, and `dispatch trigger run|pause|resume`.

Pause and resume live in Redis (the trigger's state hash), so they hold fleet-wide and across
restarts. A pause withdraws the pending occurrences at once rather than at the next round; a
resume (which also lifts a stall-guard disable) restarts the stall count, and the next round
mints the next occurrence. A manual run mints one job now, outside the schedule: its id and
dedup key say "run", no round withdraws it, and it counts as the previous job for overlap.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from dispatch.config.schemas import ConfigSnapshot
from dispatch.config.settings import Settings
from dispatch.model import iso
from dispatch.triggers.agreement import Agreement, agreement
from dispatch.triggers.minter import MANUAL
from dispatch.triggers.spec import Compiled, dedup_of, fingerprint, manual_id
from dispatch.triggers.store import Minted, TriggerState, TriggerStore

OVERDUE_AFTER_MS = 120_000  # an occurrence this late unminted makes its trigger overdue


async def fleet_words(
    redis: Redis, settings: Settings, snapshot: ConfigSnapshot
) -> list[tuple[bool, bool, str]]:
    """The doctor's lines: (ok, warning, words) for the agreement, and one per stalled trigger;
    none on a host without triggers whose fleet agrees. `snapshot` is this host's config, as
    the caller read it."""
    if "triggers.json" in snapshot.errors:
        return []
    mine = fingerprint(snapshot.triggers)
    agreed = await agreement(redis, settings.prefix, settings.host, mine)
    if not snapshot.triggers and agreed.agreed:
        return []  # nothing to mint and nobody to disagree with: no line
    lines = [(agreed.agreed, False, f"{len(snapshot.triggers)} triggers, {agreed.words()}")]
    store = TriggerStore(redis, settings.prefix)
    states = await store.states([t.id for t in snapshot.triggers], 0)
    lines += [
        (True, True, f"{tid} disabled by the stall guard ({st.disabled}): dispatch trigger resume")
        for tid, st in states.items()
        if st.disabled
    ]
    return lines


async def run_now(store: TriggerStore, c: Compiled, now_ms: int) -> str:
    """Mint one job of the trigger now; its id."""
    m = Minted(manual_id(c.id), c.queue, MANUAL, now_ms)
    dedup = dedup_of(c.id, now_ms, manual=True)
    await store.mint(c.id, m, c.job(m.job_id, dedup), 0, dedup)
    return m.job_id


async def pause(store: TriggerStore, tid: str, now_ms: int, host: str) -> int:
    """Pause the trigger fleet-wide; how many pending occurrences were withdrawn."""
    await store.set_fields(tid, paused=f"{iso(now_ms)} {host}")
    state = (await store.states([tid], now_ms))[tid]
    withdrawn = 0
    for m in state.future:
        if m.sig != MANUAL:
            withdrawn += await store.withdraw(tid, m, dedup_of(tid, m.at_ms))
    return withdrawn


async def resume(store: TriggerStore, tid: str, now_ms: int) -> None:
    await store.drop_fields(tid, "paused", "disabled")
    await store.set_fields(tid, since=now_ms)


async def rows(store: TriggerStore, triggers: list[Compiled], now_ms: int) -> list[dict[str, Any]]:
    """One row per trigger of the file, for the table and `--json`."""
    states = await store.states([c.id for c in triggers], now_ms)
    out = []
    for c in triggers:
        st = states[c.id]
        last = await store.recent(c.id, now_ms, 1)
        row = _row(c, st, now_ms) | await _last(store, last[0] if last else None)
        row["overdue"] = _overdue(c, row["next"], last[0].at_ms if last else None, now_ms)
        out.append(row)
    return out


def _overdue(c: Compiled, next_at: str | None, last_ms: int | None, now_ms: int) -> bool:
    """A running trigger that minted before, whose latest occurrence due more than
    `OVERDUE_AFTER_MS` ago was not minted: the fleet stopped minting it."""
    if next_at is None or last_ms is None:
        return False  # paused, disabled, or new: nothing is owed yet
    owed = c.schedule.latest(now_ms - OVERDUE_AFTER_MS)
    return owed is not None and owed > last_ms


def _row(c: Compiled, st: TriggerState, now_ms: int) -> dict[str, Any]:
    t = c.trigger
    running = t.enabled and not st.paused and not st.disabled
    return {
        "id": c.id,
        "cron": t.cron,
        "tz": t.tz,
        "state": _state(t.enabled, st),
        "catchup": t.catchup,
        "overlap": t.overlap,
        "next": iso(c.due(c.schedule.next_after(now_ms))) if running else None,
        "skipped": st.skipped,
        "last_skip": st.last_skip or None,
        "paused": st.paused or None,
        "disabled": st.disabled or None,
    }


def _state(enabled: bool, st: TriggerState) -> str:
    if not enabled:
        return "disabled in file"
    if st.disabled:
        return "disabled by the stall guard"
    return "paused" if st.paused else "enabled"


async def _last(store: TriggerStore, m: Minted | None) -> dict[str, Any]:
    if m is None:
        return {"last": None, "last_job": None, "last_outcome": None}
    result = (await store.results([m]))[0]
    if result is not None:
        outcome = f"{result.outcome}" + (f" ({result.reason})" if result.reason else "")
    else:
        outcome = "waiting or running" if await store.live(m) else "gone"
    return {"last": iso(m.at_ms), "last_job": m.job_id, "last_outcome": outcome}


def table(found: list[dict[str, Any]], agreed: Agreement) -> str:
    header = ("ID", "CRON", "TZ", "STATE", "NEXT", "LAST", "LAST JOB", "OUTCOME", "SKIPPED")
    keys = ("id", "cron", "tz", "state", "next", "last", "last_job", "last_outcome", "skipped")
    shown = [r | {"state": r["state"] + " (overdue)"} if r.get("overdue") else r for r in found]
    cells = [tuple(str(r[k] if r[k] is not None else "-") for k in keys) for r in shown]
    widths = [max(len(x) for x in col) for col in zip(header, *cells, strict=False)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *cells]
    ]
    lines = lines if found else ["(no triggers)"]
    return "\n".join([*lines, f"fleet agreement: {agreed.words()} [fingerprint {agreed.mine}]"])
