"""The metrics leader's round, for tests that read its fleet gauges mid-round: a config with a
fleet run cap and a trigger, and the round's spend read held open with events."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from dispatch.config.schemas import ConfigSnapshot
from dispatch.config.watcher import load_once
from dispatch.daemon import metrics as metrics_module
from dispatch.spend.standing import lines

RUNS_CAP = {"ledger": "the whole fleet", "metric": "runs", "window": "day"}  # its cap is 5


def leader_config(folder: Path) -> ConfigSnapshot:
    """A fleet cap of 5 runs a day and a nightly trigger, as their files load."""
    (folder / "scoped-limits.json").write_text(
        json.dumps({"version": 1, "limits": [{"scope": "*", "day": 5}]})
    )
    nightly = {"id": "nightly", "cron": "0 0 * * *", "job": {"command": ["true"]}}
    (folder / "triggers.json").write_text(json.dumps({"version": 1, "triggers": [nightly]}))
    return load_once(folder)


def hold_spend_read(monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, asyncio.Event]:
    """(asked, answer): the leader's spend read sets `asked`, then waits for `answer` before
    it goes to Redis."""
    asked, answer = asyncio.Event(), asyncio.Event()

    async def held(*args: object) -> object:
        asked.set()
        await answer.wait()
        return await lines(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(metrics_module, "lines", held)
    return asked, answer
