"""Head gate: a config file written by a newer release holds every job until this host is
upgraded or the file is set back, so no limit or window is misread. (A job document newer
than this build is caught before decoding, by the processor.) settings.json is the overlay
gate's own, later in the order."""

from __future__ import annotations

from dispatch.config.schemas import ConfigSnapshot
from dispatch.gates.base import ADMIT, NEWER_RELEASE_DELAY_MS, Decision, Defer, Pickup
from dispatch.reasons import NEWER_RELEASE


class HeadGate:
    name = "head"

    def inert(self, config: ConfigSnapshot) -> bool:
        return all(f == "settings.json" for f in config.newer)

    async def check(self, pickup: Pickup) -> Decision:
        newer = [f for f in pickup.config.newer if f != "settings.json"]
        if not newer:
            return ADMIT
        detail = f"{', '.join(newer)} written by a newer release; upgrade this host"
        return Defer(NEWER_RELEASE_DELAY_MS, NEWER_RELEASE, detail=detail)
