"""budget_reserve and budget_settle called directly with explicit KEYS and ARGV: every reply,
all-or-nothing across counters, exactly-once closing, and bad calls that write nothing (a DUMP
of every key under the test's prefix, before and after)."""

from __future__ import annotations

import re
import time

import pytest

from dispatch.queue.keys import budget_keys
from dispatch.queue.scripts import Code, script

pytestmark = pytest.mark.anyio

BAD = Code.BAD_INPUT
RID = "jobs|j1|1|h:1"
LATER = int(time.time() * 1000) + 86_400_000  # counters expire a day from now
TTL = 60_000


class B:
    def __init__(self, redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.k = budget_keys(prefix)

    def counter(self, name: str) -> str:
        return self.k.counter(name)

    async def reserve(self, rid, counters, urgent=0, ttl=TTL, keys=None):
        """counters: (name, metric, amount, cap, soft)."""
        args = [rid, ttl, urgent]
        for _, metric, amount, cap, soft in counters:
            args += [metric, amount, cap, soft, LATER]
        if keys is None:
            keys = [self.k.reservation(rid), self.k.open, *(self.counter(c[0]) for c in counters)]
        return await script("budget_reserve")(self.redis, keys, args)

    async def settle(self, rid, names, mode="settle", usd=-1, tokens=0, keys=None):
        if keys is None:
            keys = [self.k.reservation(rid), self.k.open, *(self.counter(n) for n in names)]
        return await script("budget_settle")(self.redis, keys, [rid, mode, usd, tokens])

    async def get(self, name: str) -> tuple[int, int]:
        used, held = await self.redis.hmget(self.counter(name), "used", "held")
        return int(used or 0), int(held or 0)

    async def snapshot(self) -> dict[bytes, bytes]:
        keys = sorted(await self.redis.keys(f"*{self.prefix}*"))
        return {key: await self.redis.dump(key) for key in keys}


@pytest.fixture
def b(redis, prefix) -> B:
    return B(redis, prefix)


RUNS = ("runs:*:d", "runs", 1, 2, 2)
USD = ("usd:*:d", "usd", 3_000_000, 10_000_000, 10_000_000)
TOKENS = ("tokens:*:d", "tokens", 0, 1000, 1000)


def test_headers_name_the_budget_keys() -> None:
    for name in ("budget_reserve", "budget_settle"):
        header = script(name).source.split("]]", 1)[0]
        listed = re.findall(r"^KEYS\[(\d+)\]\s+(\w+)", header, re.MULTILINE)
        assert [f for _, f in listed] == ["reservation", "open", "counter"]


async def test_reserve_takes_every_counter_and_records_it(b: B) -> None:
    assert await b.reserve(RID, [RUNS, USD, TOKENS]) == [1]
    assert await b.get("runs:*:d") == (0, 1)
    assert await b.get("usd:*:d") == (0, 3_000_000)
    assert not await b.redis.exists(b.counter("tokens:*:d"))  # recorded after the run
    record = await b.redis.hgetall(b.k.reservation(RID))
    assert record[b.counter("usd:*:d").encode()] == f"usd 3000000 {LATER}".encode()
    assert await b.redis.zrange(b.k.open, 0, -1) == [RID.encode()]
    assert 0 < await b.redis.pttl(b.k.reservation(RID)) <= TTL
    assert abs(await b.redis.pexpiretime(b.counter("runs:*:d")) - LATER) < 2


async def test_a_retried_reserve_changes_nothing(b: B) -> None:
    await b.reserve(RID, [RUNS])
    before = await b.snapshot()
    assert await b.reserve(RID, [RUNS]) == [2]
    assert await b.snapshot() == before


async def test_equal_to_the_cap_fits_one_more_does_not(b: B) -> None:
    assert await b.reserve("jobs|a|1|h:1", [RUNS]) == [1]
    assert await b.reserve("jobs|b|1|h:2", [RUNS]) == [1]
    before = await b.snapshot()
    assert await b.reserve("jobs|c|1|h:3", [RUNS]) == [0, 1, b"cap", 0, 2]
    assert await b.snapshot() == before


async def test_one_counter_over_its_cap_reserves_in_none(b: B) -> None:
    full = ("runs:repo:d", "runs", 1, 0, 0)  # a cap of 0: nothing may run
    before = await b.snapshot()
    assert await b.reserve(RID, [RUNS, USD, full]) == [0, 3, b"cap", 0, 0]
    assert await b.snapshot() == before


async def test_dollars_fit_to_the_micro_dollar(b: B) -> None:
    exact = ("usd:*:d", "usd", 4_000_000, 8_000_000, 8_000_000)
    assert await b.reserve("jobs|a|1|h:1", [exact]) == [1]
    assert await b.reserve("jobs|b|1|h:2", [exact]) == [1]
    one_more = ("usd:*:d", "usd", 1, 8_000_000, 8_000_000)
    assert await b.reserve("jobs|c|1|h:3", [one_more]) == [0, 1, b"cap", 0, 8_000_000]


async def test_a_zero_dollar_reservation_is_refused_once_the_cap_is_spent(b: B) -> None:
    spent = ("usd:*:d", "usd", 5, 5, 5)
    assert await b.reserve("jobs|a|1|h:1", [spent]) == [1]
    assert await b.settle("jobs|a|1|h:1", ["usd:*:d"]) == 1
    nothing = ("usd:*:d", "usd", 0, 5, 5)
    assert await b.reserve("jobs|b|1|h:2", [nothing]) == [0, 1, b"cap", 5, 0]


async def test_the_soft_band_holds_all_but_urgent_jobs(b: B) -> None:
    banded = ("runs:*:d", "runs", 1, 3, 2)  # cap 3, band from 2
    assert await b.reserve("jobs|a|1|h:1", [banded]) == [1]
    assert await b.reserve("jobs|b|1|h:2", [banded]) == [1]
    assert await b.reserve("jobs|c|1|h:3", [banded]) == [0, 1, b"soft", 0, 2]
    assert await b.reserve("jobs|c|1|h:3", [banded], urgent=1) == [1]
    assert await b.reserve("jobs|d|1|h:4", [banded], urgent=1) == [0, 1, b"cap", 0, 3]


async def test_a_cap_anywhere_comes_before_a_band_anywhere(b: B) -> None:
    banded = ("runs:*:d", "runs", 1, 5, 0)
    full = ("runs:repo:d", "runs", 1, 0, 0)
    assert await b.reserve(RID, [banded, full]) == [0, 2, b"cap", 0, 0]


async def test_tokens_are_checked_before_and_recorded_after(b: B) -> None:
    assert await b.reserve("jobs|a|1|h:1", [TOKENS]) == [1]
    assert await b.settle("jobs|a|1|h:1", ["tokens:*:d"], tokens=999) == 1
    assert await b.get("tokens:*:d") == (999, 0)
    assert await b.reserve("jobs|b|1|h:2", [TOKENS]) == [1]  # under the cap: may overshoot
    assert await b.settle("jobs|b|1|h:2", ["tokens:*:d"], tokens=50) == 1
    assert await b.reserve("jobs|c|1|h:3", [TOKENS]) == [0, 1, b"cap", 1049, 0]


async def test_settle_charges_the_report_up_or_down_and_runs_once(b: B) -> None:
    assert await b.reserve(RID, [RUNS, USD]) == [1]
    assert await b.settle(RID, ["runs:*:d", "usd:*:d"], usd=4_500_000) == 1
    assert await b.get("usd:*:d") == (4_500_000, 0)  # over the reserved 3: charged in full
    assert await b.get("runs:*:d") == (1, 0)
    assert await b.settle(RID, ["runs:*:d", "usd:*:d"], usd=1) == 0  # closed: nothing more
    assert await b.get("usd:*:d") == (4_500_000, 0)
    assert not await b.redis.exists(b.k.reservation(RID))
    assert await b.redis.zcard(b.k.open) == 0
    other = "jobs|j2|1|h:2"
    assert await b.reserve(other, [USD]) == [1]
    assert await b.settle(other, ["usd:*:d"], usd=250_000) == 1
    assert await b.get("usd:*:d") == (4_750_000, 0)


async def test_settle_without_a_report_charges_the_reserved_amount(b: B) -> None:
    await b.reserve(RID, [USD])
    assert await b.settle(RID, ["usd:*:d"]) == 1
    assert await b.get("usd:*:d") == (3_000_000, 0)


async def test_refund_gives_everything_back_and_a_late_settle_counts_nothing(b: B) -> None:
    await b.reserve(RID, [RUNS, USD, TOKENS])
    names = ["runs:*:d", "usd:*:d", "tokens:*:d"]
    assert await b.settle(RID, names, mode="refund") == 1
    assert await b.get("runs:*:d") == (0, 0)
    assert await b.get("usd:*:d") == (0, 0)
    assert await b.settle(RID, names, usd=9, tokens=9) == 0
    assert await b.get("tokens:*:d") == (0, 0)


async def test_a_settle_after_the_counter_expired_leaves_no_key(b: B) -> None:
    args: list[str | int] = [RID, TTL, 0, "runs", 1, 5, 5, int(time.time() * 1000) + 200]
    keys = [b.k.reservation(RID), b.k.open, b.counter("runs:old")]
    assert await script("budget_reserve")(b.redis, keys, args) == [1]
    await b.redis.delete(b.counter("runs:old"))  # as its expiry would
    await b.redis.hset(b.k.reservation(RID), b.counter("runs:old"), "runs 1 1000")
    assert await b.settle(RID, ["runs:old"]) == 1
    assert not await b.redis.exists(b.counter("runs:old"))


async def test_closing_an_unknown_reservation_drops_only_its_stale_open_entry(b: B) -> None:
    await b.redis.zadd(b.k.open, {"jobs|gone|1|h:9": 0})
    assert await b.settle("jobs|gone|1|h:9", []) == 0
    assert await b.redis.zcard(b.k.open) == 0


async def test_closing_an_unknown_reservation_checks_its_keys_before_any_write(b: B) -> None:
    """Regression: with no record the stale open entry was dropped before KEYS[3..] were
    looked at, so a call refused with a record was answered 0 (and wrote) without one."""
    gone = "jobs|gone|1|h:9"
    await b.redis.zadd(b.k.open, {gone: 0})
    before = await b.snapshot()
    res, runs = b.k.reservation(gone), b.counter("runs:*:d")
    for keys in (
        [res, b.k.open, b.k.open],  # a counter that is the open set
        [res, b.k.open, res],  # or the record
        [res, b.k.open, runs, runs],  # a counter twice
        [res, res],  # the record as the open set
    ):
        assert await b.settle(gone, [], keys=keys) == BAD, keys
        assert await b.snapshot() == before, keys
    assert await b.settle(gone, ["runs:*:d"]) == 0
    assert await b.redis.zcard(b.k.open) == 0


async def test_a_reserve_naming_its_record_or_open_set_as_a_counter_writes_nothing(b: B) -> None:
    await b.reserve("jobs|x|1|h:1", [RUNS])  # something to keep, and an open set
    before = await b.snapshot()
    res = b.k.reservation(RID)
    for keys in ([res, b.k.open, res], [res, b.k.open, b.k.open], [res, res, b.counter("r")]):
        assert await b.reserve(RID, [RUNS], keys=keys) == BAD, keys
        assert await b.snapshot() == before, keys


@pytest.mark.parametrize(
    "args",
    [
        [],
        [RID, TTL, 0],  # no counter
        ["", TTL, 0, "runs", 1, 2, 2, LATER],
        [RID, 0, 0, "runs", 1, 2, 2, LATER],
        [RID, TTL, 2, "runs", 1, 2, 2, LATER],
        [RID, TTL, 0, "coins", 1, 2, 2, LATER],
        [RID, TTL, 0, "runs", -1, 2, 2, LATER],
        [RID, TTL, 0, "runs", 1.5, 2, 2, LATER],
        [RID, TTL, 0, "runs", 1, "nan", 2, LATER],
        [RID, TTL, 0, "runs", 1, 2, 3, LATER],  # soft above cap
        [RID, TTL, 0, "tokens", 5, 2, 2, LATER],  # tokens are not reserved
        [RID, TTL, 0, "runs", 1, 2, 2, 0],
        [RID, TTL, 0, "runs", 1, 2, 2, LATER, "extra"],
        [RID, TTL, 0, "runs", 1, 2**53, 2, LATER],
    ],
)
async def test_a_bad_reserve_writes_nothing(b: B, args) -> None:
    await b.reserve("jobs|x|1|h:1", [RUNS, USD])  # something to keep
    before = await b.snapshot()
    keys = [b.k.reservation(RID), b.k.open, b.counter("runs:*:d")]
    assert await script("budget_reserve")(b.redis, keys, args) == BAD
    assert await b.snapshot() == before


async def test_a_reserve_missing_a_key_or_naming_one_twice_writes_nothing(b: B) -> None:
    await b.reserve("jobs|x|1|h:1", [RUNS])
    before = await b.snapshot()
    two = [RUNS, ("runs:*:d", "runs", 1, 5, 5)]
    assert await b.reserve(RID, two) == BAD
    assert await b.reserve(RID, two, keys=[b.k.reservation(RID), b.k.open]) == BAD
    assert await b.reserve(RID, [RUNS], keys=[b.k.reservation(RID)]) == BAD
    assert await b.snapshot() == before


@pytest.mark.parametrize(
    ("names", "args"),
    [
        (["runs:*:d", "usd:*:d"], [RID, "spend", -1, 0]),
        (["runs:*:d", "usd:*:d"], [RID, "settle", -2, 0]),
        (["runs:*:d", "usd:*:d"], [RID, "settle", 1.5, 0]),
        (["runs:*:d", "usd:*:d"], [RID, "settle", -1, -1]),
        (["runs:*:d", "usd:*:d"], ["", "settle", -1, 0]),
        (["runs:*:d", "usd:*:d"], [RID, "settle", -1]),
        (["runs:*:d"], [RID, "settle", -1, 0]),  # a key of the record missing
        (["runs:*:d", "runs:*:d"], [RID, "settle", -1, 0]),  # one twice, one missing
        (["runs:*:d", "usd:other"], [RID, "settle", -1, 0]),  # not the record's
        (["runs:*:d", "usd:*:d", "tokens:*:d"], [RID, "settle", -1, 0]),  # one too many
    ],
)
async def test_a_bad_settle_writes_nothing(b: B, names, args) -> None:
    await b.reserve(RID, [RUNS, USD])
    before = await b.snapshot()
    keys = [b.k.reservation(RID), b.k.open, *(b.counter(n) for n in names)]
    assert await script("budget_settle")(b.redis, keys, args) == BAD
    assert await b.snapshot() == before


async def test_a_settle_with_too_few_keys_writes_nothing(b: B) -> None:
    await b.reserve(RID, [RUNS])
    before = await b.snapshot()
    assert await b.settle(RID, [], keys=[b.k.reservation(RID)]) == BAD
    assert await b.snapshot() == before
