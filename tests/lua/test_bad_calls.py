"""Every script refuses a bad call before its first write: -4, and every key as it was.

Each script is called through the raw EVALSHA path the wrappers use (`Script.__call__`), with
keys and arguments built here by hand: a key missing or one too many, one argument at a time
replaced by garbage of the kind that position must not take, the argument count off by one,
and a batch one item over the scripts' bound. "As it was" is a DUMP of every key under the
test's prefix (found with SCAN) before and after the call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatch.queue.keys import budget_keys, host_keys, lease_keys, queue_keys
from dispatch.queue.scripts import Arg, Code, all_scripts, script

pytestmark = pytest.mark.anyio

BAD = Code.BAD_INPUT
DAY_MS = 86_400_000
YEAR_MS = 365 * DAY_MS

NUMBERS = ["", "x", "nan", "NaN", "inf", "-inf", "-1", "1.5", "1e3", "0x10", " 5", "5 ", "1e300"]
NUMBERS += ["9" * 16, "1" + "0" * 30]


def number(lo: int, hi: int) -> list[str]:
    """Garbage for an integer bounded to lo..hi: non-numbers, nan, inf, and just out of range."""
    return [*NUMBERS, str(hi + 1), *([str(lo - 1)] if lo > 0 else [])]


IDS = ["", "a b", "-a", ".a", "a:b", "a#1", "a" * 129, "é", "a\n", "a/b"]
TOKENS = ["", "h", "h:", ":1", "h:x", "h:1:2", "h h:1", "h:-1", "h:" + "1" * 100]
HOSTS = ["", "a:b", "a b", "a" * 64, "a/b"]
JSON = ["", "x", "[1]", '"{}"', "{", "}{", "nan", "null"]
RUN_IDS = ["", "a", "a#", "a#x", "#1", "a b#1", "a" * 129 + "#1"]


def text(most: int, empty_ok: bool = False) -> list[str]:
    return ["x" * (most + 1), *([] if empty_ok else [""])]


@dataclass(frozen=True)
class Call:
    """A good call of one script, and for each argument the garbage it must refuse."""

    keys: Callable[[str], list[str]]
    args: list[Arg]
    garbage: list[list[str]]
    batch: int = 0  # arguments per item for a batch script (the items come after `head`)
    head: int = 0
    # False where the keys are data (budget_settle's are the reservation record's counters, and
    # closing a record already gone takes none): a key more or less is then a call about another
    # record, refused only when that record exists (tests/lua/test_budget_scripts.py)
    fixed_keys: bool = True
    optional: int = 0  # trailing arguments a caller may leave out (lease_acquire's `over`)


def queue(fields: str) -> Callable[[str], list[str]]:
    """A queue's keys, named by `QueueKeys` fields in the script's header order."""
    return lambda prefix: [getattr(queue_keys("jobs", prefix), f) for f in fields.split()]


def owner(prefix: str) -> list[str]:
    return [host_keys("h", prefix).owner]


def lease(fields: str) -> Callable[[str], list[str]]:
    return lambda prefix: [getattr(lease_keys("gpu", prefix), f) for f in fields.split()]


def budget(fields: str) -> Callable[[str], list[str]]:
    """A reservation's keys: its record, the open set, then its counters."""

    def keys(prefix: str) -> list[str]:
        k = budget_keys(prefix)
        named = {
            "reservation": k.reservation(RID),
            "open": k.open,
            "counter": k.counter("runs:*:d"),
        }
        return [named[f] for f in fields.split()]

    return keys


def big(lo: int) -> list[str]:
    """Garbage for a script integer below 2^53."""
    return number(lo, 2**53 - 1)


RID = "jobs|c|1|h:1"
METRICS = ["", "run", "RUNS", "dollars", "usd "]
HOLDER = "h:0123456789abcdef"
JOB = b'{"id":"e"}'
TEN_YEARS = number(0, 10 * YEAR_MS)
LOCK = number(1, DAY_MS)
CALLS = {
    "job_enqueue": Call(
        queue("data queued wait delayed dedup dedup_exp done marker"),
        ["e", JOB, 0, 0, "k2", 60_000],
        # a due time: 10 years past the epoch is long gone, so the bound tried is far past now
        [
            IDS,
            [*JSON, "{" + "x" * 65536 + "}"],
            number(0, 10 * YEAR_MS + 10**13),
            TEN_YEARS,
            text(1024, empty_ok=True),
            number(0, YEAR_MS),
        ],
        batch=6,
    ),
    "job_claim": Call(
        queue("wait delayed active data lock attempts stalls queued marker paused fence"),
        [1, "h", 60_000],
        [number(0, 1000), HOSTS, LOCK],
    ),
    "job_finish": Call(
        queue(
            "active lock delayed done data queued attempts stalls defer result cancel runs "
            "runs_idx marker"
        ),
        [1000, DAY_MS, 1000, DAY_MS, "finish", "c", "h:1", 0, b"{}", "c#1", b"{}", b""],
        [
            *[number(0, 10**9), TEN_YEARS, number(0, 10**9), TEN_YEARS],
            *[["", "done", "FINISH", "retry "], IDS, TOKENS, TEN_YEARS, JSON, RUN_IDS, JSON],
            JSON[1:],
        ],
        batch=8,
        head=4,
    ),
    "job_extend": Call(
        queue("active lock cancel"), [60_000, "c", "h:1"], [LOCK, IDS, TOKENS], batch=2, head=1
    ),
    "job_sweep": Call(
        queue("active lock wait done stalls result marker cancel"),
        [1, 100, b"{}"],
        [number(0, 1000), number(1, 1000), JSON],
    ),
    "job_cancel": Call(
        queue("wait delayed active done data lock result runs runs_idx"),
        ["a", b"{}", "a#1", b"{}"],
        [IDS, JSON, RUN_IDS, JSON],
    ),
    "job_cancel_request": Call(queue("lock cancel"), ["c", "h:1", 5_000], [IDS, TOKENS, LOCK]),
    "job_withdraw": Call(
        queue("delayed data queued defer attempts dedup dedup_exp"),
        ["b", ""],
        [IDS, text(1024, empty_ok=True)],
    ),
    "queue_unpause": Call(queue("paused marker"), ["fleet:x"], [text(255)]),
    "job_handback": Call(
        queue("active lock wait marker cancel attempts runs"), ["c", "h:1"], [IDS, TOKENS], batch=2
    ),
    "host_take": Call(owner, ["v2", 60_000, ""], [text(4096), LOCK, text(4096, empty_ok=True)]),
    "host_release": Call(owner, ["v2"], [text(4096)]),
    "lease_acquire": Call(
        lease("holders fence"),
        [HOLDER, 2, 30_000, 0],
        [text(255), number(1, 1_000_000), LOCK, number(0, 1)],
        optional=1,
    ),
    "lease_renew": Call(lease("holders"), [HOLDER, 30_000], [text(255), LOCK]),
    "lease_release": Call(lease("holders"), [HOLDER], [text(255)]),
    "lease_holders": Call(lease("holders"), [], []),
    "budget_reserve": Call(
        budget("reservation open counter"),
        [RID, 60_000, 0, "runs", 1, 10, 10, 5 * DAY_MS],
        [[""], big(1), number(0, 1), METRICS, big(0), big(0), number(0, 10), big(1)],
        batch=5,
        head=3,
    ),
    "budget_settle": Call(
        budget("reservation open counter"),
        [RID, "settle", -1, 0],
        [[""], ["", "Settle", "refund ", "charge"], [x for x in big(-1) if x != "-1"], big(0)],
        fixed_keys=False,
    ),
    "run_record": Call(
        queue("lock runs runs_idx"),
        ["c", "h:1", "c#1", b"{}"],
        [IDS, TOKENS, RUN_IDS, JSON],
        batch=4,
    ),
}


class State:
    """Keys under one prefix holding a queue in every state, a host name and a lease."""

    def __init__(self, redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix

    async def call(self, name: str, keys: list[str], args: list[Arg]):
        return await script(name)(self.redis, keys, args)

    async def fill(self) -> None:
        enqueue, claim = CALLS["job_enqueue"], CALLS["job_claim"]
        keys, claim_keys = enqueue.keys(self.prefix), claim.keys(self.prefix)
        for job_id in ("c", "d"):
            assert (await self.call("job_enqueue", keys, [job_id, JOB, 0, 0, "", 0]))[0] == 1
            assert len(await self.call("job_claim", claim_keys, [1, "h", 60_000])) == 8
        finish = CALLS["job_finish"]
        ending = [*finish.args[:5], "d", "h:2", 0, b"{}", "d#1", b"{}", b""]
        assert await self.call("job_finish", finish.keys(self.prefix), ending) == [1]
        assert (await self.call("job_enqueue", keys, ["a", JOB, 0, 0, "k", 60_000]))[0] == 1
        assert (await self.call("job_enqueue", keys, ["b", JOB, 0, 3_600_000, "", 0]))[0] == 1
        await self.redis.set(queue_keys("jobs", self.prefix).paused, "fleet:y")
        assert (await self.call("host_take", owner(self.prefix), ["v1", 60_000, ""]))[0] == 2
        holders = lease("holders fence")(self.prefix)
        assert (await self.call("lease_acquire", holders, [HOLDER, 2, 30_000]))[0] == 1

    async def snapshot(self) -> dict[bytes, bytes]:
        keys = [k async for k in self.redis.scan_iter(match=f"*{self.prefix}*", count=1000)]
        return {key: await self.redis.dump(key) for key in sorted(keys)}

    async def refused(self, name: str, keys: list[str], args: list[Arg]) -> None:
        before = await self.snapshot()
        what = f"{name} with {len(keys)} keys and {len(args)} args: {args[:14]!r:.300}"
        try:
            assert await self.call(name, keys, args) == BAD, what
        finally:
            assert await self.snapshot() == before, what


@pytest.fixture
async def state(redis, prefix) -> State:
    s = State(redis, prefix)
    await s.fill()
    return s


def bad_calls(name: str, kind: str, prefix: str) -> list[tuple[list[str], list[Arg]]]:
    """The calls of one kind of mistake for one script: (keys, args) each."""
    c = CALLS[name]
    keys, args = c.keys(prefix), c.args
    if kind == "missing key":
        return [(keys[:-1], args), (keys[1:], args), ([], args)]
    if kind == "key too many":
        return [([*keys, keys[0]], args), ([*keys, _beside(keys[0])], args)]
    if kind == "argument count":
        short = args[: -1 - c.optional]
        return [(keys, [*args, "x"]), (keys, short)] if args else [(keys, ["x"])]
    if kind == "garbage":
        return [
            (keys, [*args[:i], bad, *args[i + 1 :]])
            for i, garbage in enumerate(c.garbage)
            for bad in garbage
        ]
    items = args[c.head :] * (1001 if kind == "oversized batch" else 1)
    return [(keys, [*args[: c.head], *items])]


def _beside(key: str) -> str:
    """Another key in `key`'s cluster slot: its hash tag, or, untagged, `key` made the tag."""
    tag = key[: key.index("}") + 1] if key.startswith("{") else "{" + key + "}"
    return tag + ":extra"


CASES = [
    (name, kind)
    for name, c in CALLS.items()
    for kind in ("missing key", "key too many", "argument count", "garbage", "oversized batch")
    if (kind != "oversized batch" or c.batch)
    and (c.fixed_keys or kind not in ("missing key", "key too many"))
]


def test_every_script_has_its_bad_calls() -> None:
    assert sorted(CALLS) == sorted(s.name for s in all_scripts())
    for name, c in CALLS.items():
        assert len(c.garbage) == len(c.args) == script(name).declared("ARGV"), name


@pytest.mark.parametrize("name,kind", CASES, ids=[f"{n}-{k}" for n, k in CASES])
async def test_a_bad_call_is_refused_and_changes_nothing(state: State, name, kind) -> None:
    for keys, args in bad_calls(name, kind, state.prefix):
        await state.refused(name, keys, args)


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_the_good_call_is_not_refused(state: State, name) -> None:
    """The garbage above is garbage only because the call it sits in is otherwise good."""
    c = CALLS[name]
    assert await state.call(name, c.keys(state.prefix), c.args) != BAD


ITEM = st.one_of(
    st.sampled_from([*NUMBERS, *IDS, *TOKENS, *JSON, *RUN_IDS, "finish", "retry", "0", "h:1"]),
    st.text(max_size=12),
    st.integers(-(10**20), 10**20),
    st.binary(max_size=12),
)


@st.composite
def near_good(draw: st.DrawFn, name: str) -> list[Arg]:
    """The good call's arguments, some replaced by random items, some dropped or added."""
    args = [draw(st.one_of(st.just(a), ITEM)) for a in CALLS[name].args]
    return args[: draw(st.integers(0, len(args)))] + draw(st.lists(ITEM, max_size=3))


CALLED = st.sampled_from(sorted(CALLS)).flatmap(lambda n: st.tuples(st.just(n), near_good(n)))


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(call=CALLED)
async def test_no_argument_list_fails_a_script_midway(state: State, call) -> None:
    """Whatever the arguments, a script answers (no error reply after a partial write), and
    an answer of -4 comes with nothing changed."""
    name, args = call
    keys = CALLS[name].keys(state.prefix)
    before = await state.snapshot()
    if await state.call(name, keys, args) == BAD:
        assert await state.snapshot() == before
