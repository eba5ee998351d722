"""The Runs and Spend pages (dispatch/web/run_history.py, spend_history.py) on a real Redis:
run records stored the
way a daemon stores them (the fleet mirror's `run_record` script), spend counters written by
the real reserve and settle, and what the pages make of them."""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET

import httpx
import pytest
from redis.asyncio import Redis

from dispatch.client import Client
from dispatch.clock import FakeClock
from dispatch.config.limits import zone
from dispatch.config.schemas import Overlay, ScopedLimit
from dispatch.config.settings import Settings
from dispatch.config.watcher import load_once
from dispatch.model import RunRecord, iso
from dispatch.queue import keys
from dispatch.reasons import Outcome
from dispatch.records.mirror import RunMirror
from dispatch.spend.ledger import Reservation, SpendLedger, reservation_id
from dispatch.spend.plan import MARGIN_MS, Subject, counters, micro
from dispatch.web import run_history, spend_history
from dispatch.web.charts import PLOT_H, TOP
from dispatch.web.listing import BadQuery
from dispatch.web.run_history import DAY_MS, SPANS, Waits
from tests.support.polling import clear_of_midnight

pytestmark = pytest.mark.anyio
EVIL = "<script>window.__pwned=1</script>"
S = 1000


async def server_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def run(
    job_id: str,
    ended_ms: int,
    waited_ms: int | None,
    outcome: Outcome = "completed",
    queue: str = "jobs",
    host: str = "h1",
) -> RunRecord:
    """A run that ran 5 s and ended at `ended_ms` after waiting `waited_ms` (None: refused
    before it started)."""
    started = ended_ms - 5 * S
    return RunRecord(
        id=job_id, attempt=1, host=host, queue=queue, outcome=outcome,
        queued_at=iso(started - (waited_ms or 0)),
        started_at=iso(started) if waited_ms is not None else None,
        ended_at=iso(ended_ms), slot_ms=5 * S if waited_ms is not None else 0, claim="h1:1",
    )  # fmt: skip


async def recorded(redis: Redis, prefix: str, *records: RunRecord) -> None:
    mirror = RunMirror(redis, prefix)
    for r in records:
        if r.queue != "jobs":  # the shared queue is always listed; others once enqueued to
            await redis.sadd(keys.queues_registry(prefix), r.queue)
        assert await mirror.put(r.queue, r)


def svgs(html: str) -> list[ET.Element]:
    return [ET.fromstring(s) for s in re.findall(r'<svg class="chart".*?</svg>', html, re.S)]


def of_class(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(tag) if e.get("class") == cls]


# -- runs ----------------------------------------------------------------------------------


def test_percentiles_are_nearest_rank_waits_some_run_had() -> None:
    assert Waits.of([s * S for s in range(100, 0, -1)]) == Waits(50 * S, 95 * S, 99 * S, 100)
    assert Waits.of([7]) == Waits(7, 7, 7, 1)
    assert Waits.of([]) is None


def test_a_span_is_one_of_three_and_anything_else_is_a_bad_query() -> None:
    assert [(s.bins, s.bin_ms) for s in SPANS.values()] == [
        (60, 60 * S), (96, 15 * 60 * S), (84, 2 * 3600 * S),
    ]  # fmt: skip
    with pytest.raises(BadQuery, match="use one of 1h, 24h, 7d"):
        run_history.Span.parse("2h")


async def test_an_hour_of_runs_is_binned_by_minute_with_its_throughput_and_waits(
    redis: Redis, prefix: str
) -> None:
    now = await server_ms(redis)
    await recorded(
        redis, prefix,
        run("a", now - 10 * S, 1 * S), run("b", now - 20 * S, 2 * S, "failed"),
        run("c", now - 30 * S, 10 * S),  # the last minute: 3 runs
        run("d", now - 90 * S, 4 * S), run("e", now - 100 * S, None, "policy"),  # the one before
        run("f", now - 3570 * S, 30 * S, queue="nightly"),  # the first minute, another queue
        run("old", now - 7200 * S, 1 * S),  # recorded now, ended before the span: left out
    )  # fmt: skip
    client = Client(redis, prefix, clock=FakeClock(now))
    found = await run_history.runs(client, SPANS["1h"])

    last, before, first = found.bins[-1], found.bins[-2], found.bins[0]
    assert (last.ended, last.per_minute, last.outcomes) == (3, 3.0, {"completed": 2, "failed": 1})
    assert last.waits == Waits(2 * S, 10 * S, 10 * S, 3)
    assert (before.ended, before.waits) == (2, Waits(4 * S, 4 * S, 4 * S, 1))  # e never started
    assert (first.ended, first.outcomes) == (1, {"completed": 1})
    assert sum(b.ended for b in found.bins[1:-2]) == 0
    assert (found.ended, found.per_minute) == (6, 0.1)
    assert found.waits == Waits(4 * S, 30 * S, 30 * S, 5)  # 1 2 4 10 30 s
    assert [r.record.id for r in found.newest] == ["a", "b", "c", "d", "e", "f"]
    assert (found.newest[4].waited, found.newest[4].ran_for) == ("-", "-")
    assert (found.newest[2].waited, found.newest[2].ran_for) == ("10.0 s", "5.0 s")
    assert (
        found.said[0]
        == "6 runs ended in the last hour, 0.10 a minute: 4 completed, 1 policy, 1 failed."
    )
    assert "p50 4.0 s, p95 30.0 s, p99 30.0 s, over the 5 runs that started" in found.said[1]

    (chart,) = svgs(found.throughput)
    heights = [float(r.get("height", "")) for r in of_class(chart, "rect", "col")]
    assert len(heights) == 60
    shares = [round(h / PLOT_H, 2) for h in (heights[-1], heights[-2], heights[0])]
    assert shares == [1.0, 0.67, 0.33]  # 3, 2 and 1 a minute


async def test_a_day_is_binned_by_quarter_hour(redis: Redis, prefix: str) -> None:
    now = await server_ms(redis)
    await recorded(redis, prefix, run("a", now - 20 * 60 * S, 3 * S))
    found = await run_history.runs(Client(redis, prefix, clock=FakeClock(now)), SPANS["24h"])
    assert len(found.bins) == 96
    assert [i for i, b in enumerate(found.bins) if b.ended] == [94]  # 20 min ago: 1420 // 15
    assert found.bins[94].per_minute == 1 / 15


async def test_a_queue_with_more_runs_than_are_read_says_so(
    redis: Redis, prefix: str, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_history, "MOST", 2)
    now = await server_ms(redis)
    await recorded(redis, prefix, *(run(f"j{i}", now - i * S, S) for i in range(1, 4)))
    found = await run_history.runs(Client(redis, prefix, clock=FakeClock(now)), SPANS["1h"])
    assert (found.capped, found.ended) == (["jobs"], 2)
    page = await http.get("/runs")
    assert "Queue jobs has more runs in this span than the page reads" in page.text


async def test_the_runs_page_shows_both_charts_and_the_newest_runs_as_text(
    redis: Redis, prefix: str, http: httpx.AsyncClient
) -> None:
    now = await server_ms(redis)
    await recorded(
        redis, prefix, run("a", now - 60 * S, 2 * S), run("b", now - 2 * 3600 * S, 1 * S, host=EVIL)
    )
    page = await http.get("/runs?span=24h")
    assert page.status_code == 200
    assert len(svgs(page.text)) == 2
    assert 'href="/jobs/a"' in page.text and 'href="/jobs/b"' in page.text
    assert 'aria-current="page">24h</a>' in page.text and 'href="/runs?span=7d"' in page.text
    assert EVIL not in page.text and "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page.text
    assert "2 runs ended in the last 24 hours" in page.text
    hour = await http.get("/runs")  # the default span: b ended before it
    assert "1 run ended in the last hour" in hour.text


async def test_a_span_the_page_does_not_offer_is_a_400_with_a_one_line_reason(
    http: httpx.AsyncClient,
) -> None:
    page = await http.get("/runs?span=bogus")
    assert page.status_code == 400
    (detail,) = re.findall(r'<p class="detail">(.*?)</p>', page.text, re.S)
    assert detail == "span &#39;bogus&#39;: use one of 1h, 24h, 7d"


# -- spend ---------------------------------------------------------------------------------

LIMITS = [
    {"scope": "*", "day": 5, "dayUsd": 10, "softHoldPct": 80},
    {"scope": "acme/web", "week": 3},
]


async def spent(redis: Redis, prefix: str, settings: Settings) -> None:
    """Runs on acme/web charged through the real reserve and settle, 20 and 2 days ago and
    today ($1.50, $3, $2), and one running now with its $4 cap reserved."""
    clear_of_midnight(30)  # written and read back in the same day window
    (settings.config_dir / "scoped-limits.json").write_text(
        json.dumps({"version": 1, "limits": LIMITS})
    )
    rows = load_once(settings.config_dir).limits
    ledger = SpendLedger(redis, prefix, retry_s=())
    now = int(time.time() * 1000)  # the page's clock: the client's own
    subject = Subject("acme/web", None, None, None)
    for days_ago, usd in ((20, 1.5), (2, 3.0), (0, 2.0), (0, None)):
        found = counters(
            rows, subject, 4.0, Overlay(), now - days_ago * DAY_MS, zone("UTC"), ledger.keys
        )
        rid = reservation_id("jobs", f"j{days_ago}-{usd}", 1, "h:1")
        assert isinstance(await ledger.reserve(rid, found, urgent=True), Reservation)
        if usd is not None:
            assert await ledger.close_now(rid, [c.key for c in found], "settle", micro(usd))


async def test_each_ledger_and_window_is_read_for_the_last_30_days_from_the_caps_counters(
    redis: Redis, prefix: str, settings: Settings, client: Client
) -> None:
    await spent(redis, prefix, settings)
    charts = await spend_history.spend(client, load_once(settings.config_dir))
    assert [(c.ledger, c.metric, c.kind) for c in charts] == [
        ("the whole fleet", "runs", "day"), ("the whole fleet", "usd", "day"),
        ("acme/web", "runs", "week"),
    ]  # fmt: skip
    runs, usd, week = charts
    assert (usd.cap, usd.soft) == (10_000_000, 8_000_000)
    assert len(usd.periods) == 31  # today and the 30 days before it
    used = {-1: (2_000_000, 4_000_000), -3: (3_000_000, 0), -21: (1_500_000, 0)}
    assert {
        i - 31: (p.used, p.held) for i, p in enumerate(usd.periods) if p.used is not None
    } == used
    assert len(usd.missing) == 28 and usd.periods[0].window.period in usd.missing
    assert [p.used for p in runs.periods if p.used is not None] == [1, 1, 1]
    assert runs.periods[-1].held == 1
    assert 5 <= len(week.periods) <= 6 and sum(p.used or 0 for p in week.periods) == 3
    assert usd.said == (
        f"This day ({usd.periods[-1].window.period}): $2.00 used, $4.00 in flight, cap $10.00,"
        " urgent jobs only from $8.00."
    )


async def test_the_spend_page_draws_each_ledgers_bars_with_its_cap_line(
    redis: Redis, prefix: str, settings: Settings, http: httpx.AsyncClient
) -> None:
    await spent(redis, prefix, settings)
    page = await http.get("/spend")
    assert page.status_code == 200
    for title in ("the whole fleet: runs per day", "the whole fleet: usd per day"):
        assert f"<h2>{title}</h2>" in page.text
    assert "<h2>acme/web: runs per week</h2>" in page.text
    runs, usd, week = svgs(page.text)
    for chart in (runs, usd, week):
        assert len(of_class(chart, "line", "cap")) == 1
    (cap,) = of_class(usd, "line", "cap")
    assert float(cap.get("y1", "")) == TOP  # $10 is the top of the scale ($2 + $4 in flight below)
    assert len(of_class(usd, "line", "soft")) == 1
    heights = sorted(float(r.get("height", "")) for r in of_class(usd, "rect", "col"))
    assert heights == [round(PLOT_H * 0.15, 1), round(PLOT_H * 0.2, 1), round(PLOT_H * 0.3, 1)]
    (flight,) = of_class(usd, "rect", "col extra")
    assert float(flight.get("height", "")) == round(PLOT_H * 0.4, 1)
    assert "$3.00 used, $0.00 in flight" in page.text  # a bar's hover text
    assert "No counter for" in page.text and "older than counters are kept" in page.text


async def test_without_caps_the_spend_page_says_there_are_none(http: httpx.AsyncClient) -> None:
    page = await http.get("/spend")
    assert page.status_code == 200 and "No spend cap is set" in page.text


async def test_a_counter_is_kept_a_month_past_its_window_for_the_chart(
    redis: Redis, prefix: str
) -> None:
    """Before, a counter went 8 days after its window (`MARGIN_MS`): the 30-day chart would
    have shown most of its days as never spent."""
    ledger = SpendLedger(redis, prefix, retry_s=())
    row, anyone = ScopedLimit(scope="*", day_usd=10), Subject(None, None, None, None)
    now = int(time.time() * 1000)
    (c,) = counters([row], anyone, 1.0, Overlay(), now, zone("UTC"), ledger.keys)
    assert c.expire_at_ms - c.window.end_ms >= max(30 * DAY_MS, MARGIN_MS)
    await ledger.reserve(reservation_id("jobs", "j", 1, "h:1"), [c], urgent=False)
    assert await redis.pexpiretime(c.key) - c.window.end_ms >= 30 * DAY_MS
