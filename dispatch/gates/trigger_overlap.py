"""Trigger-overlap gate: a trigger with `overlap: skip` starts no occurrence while the job of
any earlier occurrence (or of a `dispatch trigger run`) still waits or runs.

It is decided here, at pickup, because occurrences are minted ahead (dispatch/triggers/): when
an occurrence's job was made, its predecessor had not even started. Every minted job with an
earlier instant that the store keeps is looked at, in one round trip: the one just before may
itself have been skipped while an older one runs on. A job that is no trigger's,
a manual run, or one whose trigger is gone from the file or says `overlap: allow` is admitted.
The skip is a refusal (`trigger-overlap`, not retried), counted on the trigger's `skipped`.
"""

from __future__ import annotations

from redis.asyncio import Redis

from dispatch.config.schemas import ConfigSnapshot
from dispatch.gates.base import ADMIT, Decision, Pickup, Refuse
from dispatch.log import event
from dispatch.model import iso
from dispatch.reasons import TRIGGER_OVERLAP
from dispatch.triggers.spec import dedup_origin
from dispatch.triggers.store import KEEP, Minted, TriggerStore


class TriggerOverlapGate:
    name = TRIGGER_OVERLAP  # the gate is named for the one reason it gives

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.store = TriggerStore(redis, prefix)

    def inert(self, config: ConfigSnapshot) -> bool:
        return all(t.overlap != "skip" for t in config.triggers)

    async def check(self, pickup: Pickup) -> Decision:
        origin = dedup_origin(pickup.job.dedup)
        if origin is None or origin.manual:
            return ADMIT
        trigger = next((t for t in pickup.config.triggers if t.id == origin.trigger), None)
        if trigger is None or trigger.overlap != "skip":
            return ADMIT
        previous = await self._running_before(origin.trigger, origin.at_ms, pickup.job.id)
        if previous is None:
            return ADMIT
        at = iso(origin.at_ms)
        await self.store.note_skipped(origin.trigger, 1, f"{at} overlap with {previous.job_id}")
        event(
            "trigger_overlap_skipped",
            trigger=origin.trigger,
            job=pickup.job.id,
            previous=previous.job_id,
        )
        return Refuse(
            TRIGGER_OVERLAP,
            f"trigger {origin.trigger}'s previous job {previous.job_id} still waits or runs, so"
            f" its occurrence at {at} is skipped (overlap: skip)",
        )

    async def _running_before(self, tid: str, at_ms: int, job_id: str) -> Minted | None:
        """The newest earlier occurrence (every one the store keeps) whose job still waits or
        runs: a skipped occurrence ended, and must not hide a long one still running."""
        before = [m for m in await self.store.recent(tid, at_ms - 1, KEEP) if m.job_id != job_id]
        lives = await self.store.lives(before)
        return next((m for m, live in zip(before, lives, strict=True) if live), None)
