"""The status headline's words for spend, overdue triggers and the last hour's failures, and
when a trigger is overdue: pure logic over built values (tests/e2e/test_status.py runs the
same command through real daemons)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from dispatch.cli.fleet_extras import Extras, extras
from dispatch.cli.fleet_views import headline, status_text
from dispatch.config.schemas import Trigger
from dispatch.config.settings import from_env
from dispatch.fleet.view import Snapshot
from dispatch.spend.plan import MICRO
from dispatch.spend.standing import Line
from dispatch.triggers.control import OVERDUE_AFTER_MS, _overdue
from dispatch.triggers.spec import compile_trigger
from tests.support.redis_errors import mute_redis


def day(ledger: str, used: float, cap: float) -> Line:
    return Line(ledger, "usd", "day", "d", int(used * MICRO), 0, int(cap * MICRO), 0, "00:00")


def test_the_headline_names_spend_today_overdue_triggers_and_failures() -> None:
    snap = Snapshot(at_ms=1, failures={"exit-1": 3, "stalled": 1})
    spend = [day("acme/web", 9, 10), day("the whole fleet", 41.2, 200)]
    said = headline(snap, Extras(spend, [{"id": "nightly", "overdue": True}, {"id": "ok"}]))
    assert said.endswith(
        "paused: no; spend today $41.20 of $200.00; overdue: trigger nightly; "
        "4 failed in the last hour (3 exit-1, 1 stalled)"
    )
    # no fleet-wide cap: the ledger nearest its cap, named
    nearest = headline(snap, Extras([day("acme/web", 1, 10), day("folder site", 9, 10)]))
    assert "spend today $9.00 of $10.00 (folder site)" in nearest
    assert "spend" not in headline(Snapshot(at_ms=1))


def test_a_trigger_is_overdue_only_once_it_minted_and_then_missed_one() -> None:
    c = compile_trigger(Trigger(id="t", cron="0 * * * *"))  # hourly
    hour = 3_600_000
    now = 100 * hour + OVERDUE_AFTER_MS + 1
    assert not _overdue(c, "next", 100 * hour, now)  # the latest one was minted
    assert _overdue(c, "next", 99 * hour, now)  # the 100th hour's was not
    assert not _overdue(c, "next", 99 * hour, 100 * hour + OVERDUE_AFTER_MS - 1)  # not late yet
    assert not _overdue(c, None, 99 * hour, now)  # paused or disabled: nothing is owed
    assert not _overdue(c, "next", None, now)  # never minted: new, not late


@pytest.mark.anyio
async def test_a_redis_that_stops_answering_gives_a_status_without_spend_and_triggers(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    limits = {"version": 1, "limits": [{"scope": "*", "day": 10}]}
    (config / "scoped-limits.json").write_text(json.dumps(limits))
    settings = replace(from_env({"DISPATCH_CONFIG_DIR": str(config)}), prefix="p")
    async with mute_redis() as client:
        found = await asyncio.wait_for(extras(client, settings, 0, timeout_s=0.3), 5)
    assert found.spend == [] and found.missing.endswith("did not answer within 0.3 s")
    assert status_text(Snapshot(at_ms=1), found).endswith(found.missing)
