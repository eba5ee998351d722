"""Spend-cap gate on a real Redis: which rows apply, what each refusal says, the soft-hold band,
and the reservation given back when no run follows."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from redis.asyncio import Redis

from dispatch.clock import FakeClock, SystemClock
from dispatch.config.limits import zone
from dispatch.config.schemas import ConfigSnapshot, Overlay, Project, ScopedLimit
from dispatch.gates.base import ADMIT, Defer, Pickup, Refuse
from dispatch.gates.spend import Rows, SpendGate
from dispatch.model import Job
from dispatch.queue.transitions import Claim
from dispatch.reasons import DAILY_TOKEN_CAP, DOLLAR_CAP, OVER_BUDGET, SCOPE_CAP, SOFT_HOLD
from dispatch.spend.ledger import Reservation, SpendLedger
from dispatch.spend.plan import Subject, counters
from dispatch.spend.windows import local_text, window
from tests.support.pickups import claim_of

pytestmark = pytest.mark.anyio
# Counter keys expire by the server's clock (8 days past their window), so the injected clock
# starts near the real now: at noon UTC of today, where the UTC day and the Amsterdam day the
# soft-band test compares are one date (from 23:00 UTC they were a day apart, and it failed).
DAY_MS = 86_400_000
NOW = SystemClock().now_ms() // DAY_MS * DAY_MS + DAY_MS // 2


@pytest.fixture
async def ledger(redis: Redis, prefix: str) -> AsyncIterator[SpendLedger]:
    spend = SpendLedger(redis, prefix, retry_s=())
    yield spend
    await spend.drain()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def gate(ledger: SpendLedger, clock: FakeClock) -> SpendGate:
    return SpendGate(ledger, clock)


_n = 0


def pickup(rows: list[dict[str, Any]], job: Job | None = None, **overlay: Any) -> Pickup:
    """A fresh claim each time, as each pickup of the processor has."""
    global _n
    _n += 1
    job = job or Job(id=f"j{_n}", kind="forge", repo="acme/web")
    limits = tuple(msgspec.convert(row, ScopedLimit) for row in rows)
    config = ConfigSnapshot(limits=limits, overlay=msgspec.convert(overlay, Overlay))
    claim = claim_of(job)
    claim = Claim(claim.queue, claim.id, f"h:{_n}", 1, 0, 0, claim.data)
    return Pickup(claim, job, config=config)


async def used_held(ledger: SpendLedger, name: str) -> tuple[int, int]:
    used, held = await ledger.redis.hmget(ledger.keys.counter(name), "used", "held")
    return int(used or 0), int(held or 0)


async def test_no_matching_row_admits_without_touching_redis(gate, ledger, redis, prefix) -> None:
    p = pickup([{"scope": "other/repo", "day": 0}])
    assert await gate.check(p) == ADMIT
    assert p.spend is None and p.holds == []
    assert await redis.keys(f"*{prefix}*") == []


async def test_a_reservation_is_held_and_given_back_when_no_run_follows(gate, ledger) -> None:
    p = pickup([{"scope": "acme/web", "day": 5}])
    assert await gate.check(p) == ADMIT
    assert isinstance(p.spend, Reservation)
    day = window("day", NOW, zone("UTC")).period
    assert await used_held(ledger, f"runs:repo:acme/web:{day}") == (0, 1)
    await p.release()
    await ledger.drain()
    assert await used_held(ledger, f"runs:repo:acme/web:{day}") == (0, 0)


async def test_over_a_repo_run_cap_is_refused_scope_cap_with_the_cap_named(gate) -> None:
    rows = [{"scope": "acme/web", "day": 1}]
    assert await gate.check(pickup(rows)) == ADMIT
    decision = await gate.check(pickup(rows))
    assert decision == Refuse(SCOPE_CAP, "Over the day run cap for acme/web (1). Not run.")


async def test_the_fleet_row_refuses_over_budget(gate) -> None:
    decision = await gate.check(pickup([{"scope": "*", "week": 0}]))
    assert decision == Refuse(
        OVER_BUDGET, "Over the week run cap for the whole fleet (0). Not run."
    )


async def test_a_folder_is_named_by_its_base_name_only(gate, tmp_path) -> None:
    site = tmp_path / "site"
    (site / "sub").mkdir(parents=True)
    job = Job(id="local-1", kind="local", folder=str(site / "sub"))
    decision = await gate.check(pickup([{"scope": str(site), "month": 0}], job))
    assert isinstance(decision, Refuse) and decision.reason == SCOPE_CAP
    assert decision.sentence == "Over the month run cap for folder site (0). Not run."
    assert str(tmp_path) not in decision.sentence


async def test_project_and_model_rows_match_what_the_gates_resolved(gate) -> None:
    rows = [{"scope": "project:web", "day": 0}]
    p = pickup(rows)
    p.project = Project(id="web")
    assert (await gate.check(p)).reason == SCOPE_CAP
    p = pickup([{"scope": "model:qwen3", "day": 0}])
    p.model = "qwen3"
    decision = await gate.check(p)
    assert isinstance(decision, Refuse) and "for model qwen3 (0)" in decision.sentence
    assert await gate.check(pickup([{"scope": "model:qwen3", "day": 0}])) == ADMIT


async def test_a_dollar_window_without_room_for_the_job_cap_refuses(gate) -> None:
    rows = [{"scope": "*", "dayUsd": 10}]
    for _ in range(3):
        assert await gate.check(pickup(rows, maxCostUsd=3)) == ADMIT
    decision = await gate.check(pickup(rows, maxCostUsd=3))
    assert isinstance(decision, Refuse) and decision.reason == DOLLAR_CAP
    assert decision.sentence == (
        "Over the day dollar cap for the whole fleet ($10.00): $9.00 used or in flight,"
        " and this job reserves $3.00. Not run."
    )
    job = Job(id="cheap", kind="forge", repo="acme/web", max_cost_usd=1)
    assert await gate.check(pickup(rows, job, maxCostUsd=3)) == ADMIT  # the job's cap first


async def test_the_token_cap_is_checked_before_and_recorded_after(gate, ledger) -> None:
    rows = [{"scope": "acme/web", "dailyTokens": 1000}]
    p = pickup(rows)
    assert await gate.check(p) == ADMIT
    assert p.spend is not None
    p.spend.close("settle", -1, 1000)
    await ledger.drain()
    decision = await gate.check(pickup(rows))
    assert isinstance(decision, Refuse) and decision.reason == DAILY_TOKEN_CAP
    assert decision.sentence == (
        "Over the day token cap for acme/web (1,000): 1,000 tokens used. Not run."
    )


async def test_the_soft_band_defers_until_the_window_turns_unless_urgent(gate, clock) -> None:
    # the reference's meaning: the band starts at 80% of the cap (cap 10: 8 run, 9 and 10 wait)
    rows = [{"scope": "acme/web", "day": 10, "softHoldPct": 80}]
    for _ in range(8):
        assert await gate.check(pickup(rows)) == ADMIT
    decision = await gate.check(pickup(rows, budgetTz="Europe/Amsterdam"))
    assert isinstance(decision, Defer) and decision.reason == SOFT_HOLD
    end = window("day", NOW, zone("Europe/Amsterdam")).end_ms
    assert decision.delay_ms == end - NOW
    assert "day run cap for acme/web (10): it starts at 8" in decision.detail
    turns = local_text(end, zone("Europe/Amsterdam"))
    assert turns.endswith(("00:00 CET", "00:00 CEST")) and turns in decision.detail
    urgent = Job(id="urgent", kind="forge", repo="acme/web", urgent=True)
    assert await gate.check(pickup(rows, urgent)) == ADMIT


async def test_the_settings_band_applies_where_a_row_has_none(gate) -> None:
    rows = [{"scope": "*", "day": 2}]
    assert await gate.check(pickup(rows, softHoldPct=50)) == ADMIT
    decision = await gate.check(pickup(rows, softHoldPct=50))
    assert isinstance(decision, Defer) and decision.reason == SOFT_HOLD


async def test_every_matching_row_must_have_room(gate, ledger) -> None:
    rows = [{"scope": "*", "day": 100}, {"scope": "acme/web", "day": 1}]
    assert await gate.check(pickup(rows)) == ADMIT
    assert (await gate.check(pickup(rows))).reason == SCOPE_CAP
    day = window("day", NOW, zone("UTC")).period
    assert await used_held(ledger, f"runs:*:{day}") == (0, 1)  # the refusal counted nothing


async def test_a_reserve_whose_reply_is_lost_is_given_back(gate, ledger, monkeypatch) -> None:
    rows = [{"scope": "acme/web", "day": 5}]
    real = ledger.reserve

    async def lost_reply(*args: Any, **kwargs: Any) -> Any:
        await real(*args, **kwargs)
        raise TimeoutError("no reply")

    monkeypatch.setattr(ledger, "reserve", lost_reply)
    with pytest.raises(TimeoutError):
        await gate.check(pickup(rows))
    await ledger.drain()
    day = window("day", NOW, zone("UTC")).period
    assert await used_held(ledger, f"runs:repo:acme/web:{day}") == (0, 0)
    assert await ledger.redis.zcard(ledger.keys.open) == 0


# The rows are indexed by the ledger each can match; `counters` of the rows the index hands
# over is `counters` of every row, whatever the job.

SCOPES = ["*", "acme/web", "ACME/Web2", "project:web", "model:qwen3", "/", "/srv", "/srv/site/"]
SCOPES += ["/srv/site/sub", "/srv/sitex", "/opt"]


async def test_the_index_hands_over_every_row_that_matches(ledger, tmp_path) -> None:
    (tmp_path / "real" / "deep").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    scopes = [*SCOPES, str(tmp_path / "link"), str(tmp_path / "real" / "deep")]
    rows = tuple(msgspec.convert({"scope": s, "day": 3}, ScopedLimit) for s in scopes)
    index = Rows(rows)
    folders = [None, "/", "/srv", "/srv/site", "/srv/site/sub/x", "/srv/sitex", "/elsewhere"]
    folders += [str(tmp_path / "real"), str(tmp_path / "real" / "deep" / "er")]
    for repo, folder, project, model in itertools.product(
        [None, "acme/web", "acme/web2"], folders, [None, "web"], [None, "qwen3", "llama"]
    ):
        subject = Subject(repo, folder, project, model)
        handed, by_folder = index.matching(subject)
        every = counters(rows, subject, None, Overlay(), NOW, zone("UTC"), ledger.keys)
        assert counters(handed, subject, None, Overlay(), NOW, zone("UTC"), ledger.keys) == every
        assert len(handed) == len(every)  # nothing more than the matching rows, in file order
        assert by_folder == any(row.scope.startswith("/") for row in handed)


async def test_a_new_file_is_indexed_anew(gate) -> None:
    assert await gate.check(pickup([{"scope": "acme/other", "day": 0}])) == ADMIT
    assert (await gate.check(pickup([{"scope": "acme/web", "day": 0}]))).reason == SCOPE_CAP
