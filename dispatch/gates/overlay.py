"""Settings-overlay gate: settings.json is read once per pickup (the snapshot). A newer release
wrote it: hold the job. It is broken: refuse the job (recorded, not retried) rather than run it
on settings the operator did not mean. Otherwise it supplies the job's effective model."""

from __future__ import annotations

from dispatch.gates.base import ADMIT, NEWER_RELEASE_DELAY_MS, Decision, Defer, Pickup, Refuse
from dispatch.reasons import NEWER_RELEASE, SETTINGS_OVERLAY_INVALID


class OverlayGate:
    name = "overlay"

    async def check(self, pickup: Pickup) -> Decision:
        config = pickup.config
        if "settings.json" in config.newer:
            detail = "settings.json written by a newer release; upgrade this host"
            return Defer(NEWER_RELEASE_DELAY_MS, NEWER_RELEASE, detail=detail)
        if config.overlay_error is not None:
            return Refuse(SETTINGS_OVERLAY_INVALID, f"settings.json: {config.overlay_error}")
        pickup.model = pickup.job.model or config.overlay.model
        return ADMIT
