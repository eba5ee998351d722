"""The status headline's words for spend, overdue triggers and the last hour's failures, and
when a trigger is overdue: pure logic over built values (tests/e2e/test_status.py runs the
same command through real daemons)."""

from __future__ import annotations

from dispatch.cli.fleet_extras import Extras
from dispatch.cli.fleet_views import headline
from dispatch.config.schemas import Trigger
from dispatch.fleet.view import Snapshot
from dispatch.spend.plan import MICRO
from dispatch.spend.standing import Line
from dispatch.triggers.control import OVERDUE_AFTER_MS, _overdue
from dispatch.triggers.spec import compile_trigger


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
