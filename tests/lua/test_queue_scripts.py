"""The queue scripts called directly with explicit KEYS and ARGV, every return code included.

KEYS come from `dispatch.queue.keys.queue_keys` fields, listed here in each header's order (a test
checks the lists against the headers). "Nothing written" is checked with a DUMP of every key
under the test's prefix, before and after.
"""

from __future__ import annotations

import re

import pytest

from dispatch.queue.keys import queue_keys
from dispatch.queue.scripts import Code, script
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio

LOST, NOT_FOUND, CONFLICT, BAD = (
    Code.LOCK_LOST,
    Code.NOT_FOUND,
    Code.CONFLICT,
    Code.BAD_INPUT,
)
DAY_MS = 86_400_000
KEEP = [1000, DAY_MS, 1000, DAY_MS]  # retention that trims nothing

KEYS = {
    name: tuple(fields.split())
    for name, fields in {
        "job_enqueue": "data queued wait delayed dedup dedup_exp done marker",
        "job_claim": "wait delayed active data lock attempts stalls queued marker paused fence",
        "job_finish": "active lock delayed done data queued attempts stalls defer result cancel "
        "runs runs_idx marker",
        "job_extend": "active lock cancel",
        "job_sweep": "active lock wait done stalls result marker cancel",
        "job_cancel": "wait delayed active done data lock result runs runs_idx",
        "job_cancel_request": "lock cancel",
        "queue_unpause": "paused marker",
        "job_handback": "active lock wait marker cancel attempts runs",
        "job_withdraw": "delayed data queued defer attempts dedup dedup_exp",
    }.items()
}


class Q:
    """One queue's keys and a thin caller per script; arguments stay explicit at each call."""

    def __init__(self, redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.k = queue_keys("jobs", prefix)

    async def call(self, name: str, *args):
        keys = [getattr(self.k, field) for field in KEYS[name]]
        return await script(name)(self.redis, keys, list(args))

    async def enqueue(self, job_id, job=b"{}", due=0, delay=0, dedup="", window=0):
        return await self.call("job_enqueue", job_id, job, due, delay, dedup, window)

    async def claim(self, count=1, host="h", lock_ms=60_000):
        return await self.call("job_claim", count, host, lock_ms)

    async def claim_one(self, lock_ms=60_000) -> tuple[str, str]:
        reply = await self.claim(1, "h", lock_ms)
        assert len(reply) == 8, reply
        return reply[2].decode(), reply[3].decode()

    async def finish(self, *items, keep=KEEP):
        args = list(keep)
        for item in items:
            args += list(item)
        return await self.call("job_finish", *args)

    async def sweep(self, max_stalls=3, limit=100, result=b'{"reason":"stalled"}'):
        return await self.call("job_sweep", max_stalls, limit, result)

    async def extend(self, lock_ms, *pairs):
        return await self.call("job_extend", lock_ms, *[x for pair in pairs for x in pair])

    async def cancel(self, job_id, result=b'{"state":"cancelled"}', run_id="r#1", run=b"{}"):
        return await self.call("job_cancel", job_id, result, run_id, run)

    async def handback(self, *pairs):
        return await self.call("job_handback", *[x for pair in pairs for x in pair])

    async def now_ms(self) -> int:
        seconds, micros = await self.redis.time()
        return seconds * 1000 + micros // 1000

    async def wait_ids(self) -> list[str]:
        return [x.decode() for x in await self.redis.lrange(self.k.wait, 0, -1)]

    async def zset(self, key) -> list[str]:
        return [x.decode() for x in await self.redis.zrange(key, 0, -1)]

    async def state(self, job_id: str) -> list[str]:
        """Every structure that holds the id: exactly one for a healthy job."""
        found = [
            name
            for name in ("delayed", "active", "done")
            if await self.redis.zscore(getattr(self.k, name), job_id) is not None
        ]
        return found + ["wait"] * (await self.wait_ids()).count(job_id)

    async def snapshot(self) -> dict[bytes, bytes]:
        keys = sorted(await self.redis.keys(f"*{self.prefix}*"))
        return {key: await self.redis.dump(key) for key in keys}


async def server_passes(q: Q, instant_ms: float) -> None:
    """Server time decides, so poll it rather than sleep."""

    async def passed() -> bool:
        return await q.now_ms() > instant_ms

    await eventually(passed, timeout=5.0, every=0.005)


async def assert_bad_input_writes_nothing(q: Q, name: str, args) -> None:
    """The call answers -4 and every key under the prefix is as it was, even if the call raised."""
    before = await q.snapshot()
    try:
        assert await q.call(name, *args) == BAD
    finally:
        assert await q.snapshot() == before


@pytest.fixture
def q(redis, prefix) -> Q:
    return Q(redis, prefix)


def test_key_lists_follow_the_headers() -> None:
    for name, fields in KEYS.items():
        header = script(name).source.split("]]", 1)[0]
        listed = re.findall(r"^KEYS\[(\d+)\]\s+(\w+)", header, re.MULTILINE)
        assert [(int(n), f) for n, f in listed] == list(enumerate(fields, 1)), name


# -- job_enqueue ---------------------------------------------------------------------------


async def test_enqueue_ready_job(q: Q) -> None:
    before = await q.now_ms()
    assert await q.enqueue("a", b'{"x":1}') == [1, b"a"]
    assert await q.wait_ids() == ["a"]
    assert await q.redis.hget(q.k.data, "a") == b'{"x":1}'
    assert before <= int(await q.redis.hget(q.k.queued, "a")) <= await q.now_ms()
    assert await q.redis.zscore(q.k.marker, "w") == 0


async def test_enqueue_with_delay_or_future_due_goes_to_delayed(q: Q) -> None:
    now = await q.now_ms()
    assert await q.enqueue("later", delay=60_000) == [1, b"later"]
    assert await q.enqueue("due", due=now + 120_000) == [1, b"due"]
    assert await q.enqueue("past", due=now - 1000) == [1, b"past"]  # overdue: ready now
    assert await q.zset(q.k.delayed) == ["later", "due"]
    assert now + 60_000 <= await q.redis.zscore(q.k.delayed, "later") <= now + 61_000
    assert await q.redis.zscore(q.k.delayed, "due") == now + 120_000
    assert await q.wait_ids() == ["past"]
    assert await q.redis.zscore(q.k.marker, "d") is not None  # wakes daemons to re-read due


async def test_enqueue_batch_reports_one_pair_per_job(q: Q) -> None:
    reply = await q.call("job_enqueue", "a", b"{}", 0, 0, "", 0, "b", b"{}", 0, 0, "", 0)
    assert reply == [1, b"a", 1, b"b"]
    assert await q.wait_ids() == ["a", "b"]


async def test_enqueue_taken_id_is_a_conflict_and_writes_nothing(q: Q) -> None:
    await q.enqueue("a", b'{"n":"first"}')
    before = await q.snapshot()
    assert await q.enqueue("a", b'{"n":"second"}') == [CONFLICT, b"a"]
    assert await q.snapshot() == before
    # the same id twice in one call: the first wins
    one, two = b'{"n":1}', b'{"n":2}'
    reply = await q.call("job_enqueue", "b", one, 0, 0, "", 0, "b", two, 0, 0, "", 0)
    assert reply == [1, b"b", CONFLICT, b"b"]
    assert await q.redis.hget(q.k.data, "b") == one


async def test_duplicate_within_window_returns_first_id_and_writes_nothing(q: Q) -> None:
    assert await q.enqueue("a", dedup="k", window=60_000) == [1, b"a"]
    before = await q.snapshot()
    assert await q.enqueue("b", dedup="k", window=60_000) == [0, b"a"]
    assert await q.snapshot() == before
    reply = await q.call("job_enqueue", "c", b"{}", 0, 0, "j", 60_000, "d", b"{}", 0, 0, "j", 1)
    assert reply == [1, b"c", 0, b"c"]  # a duplicate inside the same call
    assert await q.wait_ids() == ["a", "c"]


async def test_duplicate_of_a_finished_job_within_window(q: Q) -> None:
    await q.enqueue("a", dedup="k", window=60_000)
    job_id, token = await q.claim_one()
    assert await q.finish(["finish", job_id, token, 0, b"{}", "", "", ""]) == [1]
    assert await q.enqueue("b", dedup="k", window=60_000) == [0, b"a"]


async def test_dedup_lapses_after_window_once_job_finished(q: Q) -> None:
    await q.enqueue("a", dedup="k", window=50)
    job_id, token = await q.claim_one()
    assert await q.finish(["finish", job_id, token, 0, b"{}", "", "", ""]) == [1]
    exp = await q.redis.zscore(q.k.dedup_exp, "k")
    await server_passes(q, exp)
    assert await q.enqueue("b", dedup="k", window=50) == [1, b"b"]
    assert (await q.redis.hget(q.k.dedup, "k")).endswith(b" b")


async def test_dedup_holds_past_window_while_job_unfinished(q: Q) -> None:
    await q.enqueue("a", dedup="k", window=50)
    await server_passes(q, await q.redis.zscore(q.k.dedup_exp, "k"))
    assert await q.enqueue("b", dedup="k", window=50) == [0, b"a"]
    assert await q.wait_ids() == ["a"]


async def test_dedup_lapses_when_job_finishes_after_window(q: Q) -> None:
    await q.enqueue("a", dedup="k", window=50)
    await server_passes(q, await q.redis.zscore(q.k.dedup_exp, "k"))
    assert await q.enqueue("b", dedup="k", window=50) == [0, b"a"]  # still live: holds
    job_id, token = await q.claim_one()
    assert await q.finish(["finish", job_id, token, 0, b"{}", "", "", ""]) == [1]
    # window long gone and the job finished: the header says the key no longer holds
    assert await q.enqueue("c", dedup="k", window=50) == [1, b"c"]


def enqueue_item(job_id="n", job=b"{}", due=0, delay=0, dedup="", window=0) -> list:
    return [job_id, job, due, delay, dedup, window]


BAD_ENQUEUE = {
    "no args": [],
    "short": enqueue_item()[:5],
    "long": [*enqueue_item(), "x"],
    "empty id": enqueue_item(job_id=""),
    "empty job": enqueue_item(job=b""),
    "negative due": enqueue_item(due=-1),
    "negative delay": enqueue_item(delay=-5),
    "negative window": enqueue_item(dedup="k", window=-1),
    "fractional delay": enqueue_item(delay=1.5),
    "text due": enqueue_item(due="soon"),
    "nan window": enqueue_item(dedup="k", window="nan"),
    "inf delay": enqueue_item(delay="inf"),
    "second item bad": [*enqueue_item("ok1", dedup="k"), *enqueue_item("ok2", delay=-1)],
}


@pytest.mark.parametrize("args", BAD_ENQUEUE.values(), ids=BAD_ENQUEUE.keys())
async def test_enqueue_bad_input_writes_nothing(q: Q, args) -> None:
    # a lapsed dedup key of a live job: a purge that ran before validation would re-arm it
    await q.enqueue("seed", dedup="k", window=0)
    await server_passes(q, await q.redis.zscore(q.k.dedup_exp, "k"))
    await assert_bad_input_writes_nothing(q, "job_enqueue", args)


# -- job_claim -----------------------------------------------------------------------------


async def test_claim_takes_jobs_in_order_with_tokens_and_deadlines(q: Q) -> None:
    for job_id in ("a", "b", "c"):
        await q.enqueue(job_id, f'{{"id":"{job_id}"}}'.encode())
    queued_a = int(await q.redis.hget(q.k.queued, "a"))
    reply = await q.claim(2, "host-1", 30_000)
    now = reply[0]
    assert reply[1] == 0  # nothing delayed
    assert reply[2:] == [
        b"a", b"host-1:1", 1, 0, queued_a, b'{"id":"a"}',
        b"b", b"host-1:2", 1, 0, int(await q.redis.hget(q.k.queued, "b")), b'{"id":"b"}',
    ]  # fmt: skip
    assert await q.redis.zrange(q.k.active, 0, -1, withscores=True) == [
        (b"a", now + 30_000),
        (b"b", now + 30_000),
    ]
    assert await q.redis.hgetall(q.k.lock) == {b"a": b"host-1:1", b"b": b"host-1:2"}
    assert await q.wait_ids() == ["c"]
    assert await q.redis.get(q.k.fence) == b"2"
    assert await q.redis.zscore(q.k.marker, "w") == 0  # jobs remain: the marker says so


async def test_claim_counts_attempts_and_stalls(q: Q) -> None:
    await q.enqueue("a")
    await q.redis.hset(q.k.attempts, "a", 2)
    await q.redis.hset(q.k.stalls, "a", 1)
    reply = await q.claim(5)
    assert reply[2:7] == [b"a", b"h:1", 3, 1, int(await q.redis.hget(q.k.queued, "a"))]
    assert len(reply) == 8  # asked for 5, one was there


async def test_claim_on_empty_queue_returns_now_and_next_due(q: Q) -> None:
    before = await q.now_ms()
    reply = await q.claim(3)
    assert len(reply) == 2 and reply[1] == 0 and reply[0] >= before
    await q.enqueue("later", delay=60_000)
    reply = await q.claim(3)
    assert reply[1:] == [int(await q.redis.zscore(q.k.delayed, "later"))]


async def test_claim_promotes_due_delayed_jobs(q: Q) -> None:
    await q.enqueue("soon", delay=30)
    await q.enqueue("later", delay=60_000)
    assert await q.zset(q.k.delayed) == ["soon", "later"]

    async def claimed():
        reply = await q.claim(5)
        return reply[2:] and reply

    reply = await eventually(claimed, timeout=5.0, every=0.005)
    assert reply[2] == b"soon" and len(reply) == 8
    assert reply[1] == await q.redis.zscore(q.k.delayed, "later")
    assert await q.zset(q.k.delayed) == ["later"]


async def test_claim_count_zero_only_promotes(q: Q) -> None:
    await q.enqueue("soon", delay=20)

    async def promoted():
        reply = await q.claim(0)
        assert len(reply) == 2
        return await q.wait_ids() == ["soon"]

    await eventually(promoted, timeout=5.0, every=0.005)
    assert await q.redis.zcard(q.k.active) == 0 and await q.redis.zcard(q.k.delayed) == 0


async def test_paused_queue_claims_nothing_but_still_promotes(q: Q) -> None:
    await q.enqueue("a")
    await q.enqueue("soon", delay=20)
    await q.redis.set(q.k.paused, 1)

    async def promoted():
        reply = await q.claim(5)
        assert len(reply) == 2  # paused: nothing claimed
        return await q.wait_ids() == ["a", "soon"]

    await eventually(promoted, timeout=5.0, every=0.005)
    assert await q.redis.zcard(q.k.active) == 0 and not await q.redis.exists(q.k.lock)
    await q.redis.delete(q.k.paused)
    reply = await q.claim(5)
    assert reply[2::6] == [b"a", b"soon"]


async def test_claim_drops_ids_without_data(q: Q) -> None:
    await q.redis.rpush(q.k.wait, "ghost")
    await q.enqueue("a")
    reply = await q.claim(2)
    assert reply[2::6] == [b"a"]
    assert await q.wait_ids() == [] and await q.zset(q.k.active) == ["a"]


BAD_CLAIM = {
    "negative count": [-1, "h", 1000],
    "count over 1000": [1001, "h", 1000],
    "fractional count": [1.5, "h", 1000],
    "text count": ["many", "h", 1000],
    "empty host": [1, "", 1000],
    "zero lock": [1, "h", 0],
    "text lock": [1, "h", "long"],
}


@pytest.mark.parametrize("args", BAD_CLAIM.values(), ids=BAD_CLAIM.keys())
async def test_claim_bad_input_writes_nothing(q: Q, args) -> None:
    await q.enqueue("a")
    await q.enqueue("soon", delay=1)
    await server_passes(q, await q.redis.zscore(q.k.delayed, "soon"))  # due: would promote
    await assert_bad_input_writes_nothing(q, "job_claim", args)


# -- job_finish ----------------------------------------------------------------------------


async def test_finish_ends_claim_for_good(q: Q) -> None:
    await q.enqueue("a")
    job_id, token = await q.claim_one()
    await q.redis.hset(q.k.cancel, "a", 1)
    reply = await q.finish(["finish", job_id, token, 0, b'{"ok":1}', "a#1", b'{"run":1}', ""])
    assert reply == [1]
    assert await q.state("a") == ["done"]
    assert await q.redis.hget(q.k.result, "a") == b'{"ok":1}'
    assert not await q.redis.hexists(q.k.lock, "a")
    # read by nothing once the lock is gone; it goes with the job at retention (below)
    assert await q.redis.hexists(q.k.cancel, "a")
    assert await q.redis.hget(q.k.runs, "a#1") == b'{"run":1}'
    assert await q.redis.zscore(q.k.runs_idx, "a#1") == await q.redis.zscore(q.k.done, "a")


async def test_retry_counts_an_attempt_and_defer_does_not(q: Q) -> None:
    await q.enqueue("r")
    await q.enqueue("d")
    reply = await q.claim(2)
    (r_id, r_tok), (d_id, d_tok) = [(reply[i], reply[i + 1]) for i in (2, 8)]
    now = await q.now_ms()
    reply = await q.finish(
        ["retry", r_id, r_tok, 60_000, b'{"why":"retry"}', "", "", ""],
        ["defer", d_id, d_tok, 90_000, b'{"why":"defer"}', "d#1", b"{}", ""],
    )
    assert reply == [1, 1]
    assert await q.state("r") == ["delayed"] and await q.state("d") == ["delayed"]
    assert now + 60_000 <= await q.redis.zscore(q.k.delayed, "r") <= now + 61_000
    assert now + 90_000 <= await q.redis.zscore(q.k.delayed, "d") <= now + 91_000
    assert await q.redis.hget(q.k.attempts, "r") == b"1"
    assert not await q.redis.hexists(q.k.attempts, "d")
    assert await q.redis.hget(q.k.defer, "r") == b'{"why":"retry"}'
    assert await q.redis.zscore(q.k.marker, "d") == await q.redis.zscore(q.k.delayed, "r")
    assert await q.redis.hkeys(q.k.lock) == []
    # the retried job comes back on its next claim as attempt 2
    await q.redis.zadd(q.k.delayed, {"r": 0})
    assert (await q.claim(1))[2:5] == [b"r", b"h:3", 2]


async def test_a_retry_or_defer_of_a_job_asked_to_cancel_finishes_cancelled(q: Q) -> None:
    for job_id in ("r", "d", "x"):
        await q.enqueue(job_id)
    reply = await q.claim(3)
    tok = {i.decode(): t for i, t in zip(reply[2::6], reply[3::6], strict=True)}
    now = await q.now_ms()
    await q.redis.hset(q.k.cancel, mapping={"r": now + 60_000, "d": now + 60_000, "x": now - 1})
    reply = await q.finish(
        ["retry", "r", tok["r"], 60_000, b'{"why":"retry"}', "r#1", b'{"run":1}', b'{"c":"r"}'],
        ["defer", "d", tok["d"], 60_000, b'{"why":"defer"}', "", "", b'{"c":"d"}'],
        ["retry", "x", tok["x"], 60_000, b'{"why":"retry"}', "", "", b'{"c":"x"}'],  # lapsed
    )
    assert reply == [2, 2, 1]
    for job_id in ("r", "d"):
        assert await q.state(job_id) == ["done"]
        assert await q.redis.hget(q.k.result, job_id) == f'{{"c":"{job_id}"}}'.encode()
        assert not await q.redis.hexists(q.k.defer, job_id)
    assert not await q.redis.hexists(q.k.attempts, "r")  # nothing spent
    assert await q.redis.hget(q.k.runs, "r#1") == b'{"run":1}'  # the run's record as given
    assert await q.state("x") == ["delayed"] and await q.redis.hget(q.k.attempts, "x") == b"1"
    assert await q.redis.hkeys(q.k.lock) == [] and await q.redis.hkeys(q.k.cancel) == []


async def test_a_standing_cancel_request_changes_no_other_ending(q: Q) -> None:
    for job_id in ("f", "r"):
        await q.enqueue(job_id)
    reply = await q.claim(2)
    tok = {i.decode(): t for i, t in zip(reply[2::6], reply[3::6], strict=True)}
    now = await q.now_ms()
    await q.redis.hset(q.k.cancel, mapping={"f": now + 60_000, "r": now + 60_000})
    reply = await q.finish(
        ["finish", "f", tok["f"], 0, b'{"ok":1}', "", "", b'{"c":"f"}'],  # its own result stands
        ["retry", "r", tok["r"], 60_000, b"{}", "", "", ""],  # no result given: a plain retry
    )
    assert reply == [1, 1]
    assert await q.redis.hget(q.k.result, "f") == b'{"ok":1}'
    assert await q.state("r") == ["delayed"]
    assert not await q.redis.hexists(q.k.cancel, "r")  # dropped: its next claim runs


async def test_finish_with_wrong_token_is_lock_lost_and_writes_nothing(q: Q) -> None:
    await q.enqueue("a")
    job_id, token = await q.claim_one()
    before = await q.snapshot()
    for action in ("finish", "retry", "defer"):
        reply = await q.finish([action, job_id, token + "0", 0, b"{}", "a#1", b"{}", ""])
        assert reply == [LOST]
        assert await q.snapshot() == before
    assert await q.finish(["finish", "nobody", "h:9", 0, b"{}", "", "", ""]) == [LOST]
    assert await q.snapshot() == before


async def test_finish_batch_applies_only_the_held_claims(q: Q) -> None:
    await q.enqueue("a")
    await q.enqueue("b")
    reply = await q.claim(2)
    a_tok, b_tok = reply[3].decode(), reply[9].decode()
    reply = await q.finish(
        ["finish", "a", b_tok, 0, b"{}", "", "", ""],  # b's token on a
        ["finish", "b", b_tok, 0, b"{}", "", "", ""],
    )
    assert reply == [LOST, 1]
    assert await q.state("a") == ["active"] and await q.redis.hget(q.k.lock, "a") == a_tok.encode()
    assert await q.state("b") == ["done"]


async def test_finish_same_claim_twice_in_one_call_applies_once(q: Q) -> None:
    await q.enqueue("a")
    job_id, token = await q.claim_one()
    reply = await q.finish(
        ["finish", job_id, token, 0, b"{}", "", "", ""],
        ["retry", job_id, token, 60_000, b"{}", "", "", ""],
    )
    assert reply == [1, LOST]
    assert await q.state("a") == ["done"]


async def finish_in_turn(q: Q, ids, keep) -> None:
    for job_id in ids:
        await q.enqueue(job_id)
        claimed, token = await q.claim_one()
        assert claimed == job_id
        reply = await q.finish(
            ["finish", job_id, token, 0, b"{}", f"{job_id}#1", b"{}", ""], keep=keep
        )
        assert reply == [1]


async def test_retention_trims_oldest_finished_job_past_the_count(q: Q) -> None:
    # same-ms finishes tie-break by id, so ids sort in finishing order
    await finish_in_turn(q, ["j1", "j2"], keep=[2, DAY_MS, 1000, DAY_MS])
    await q.redis.hset(q.k.defer, "j1", b"{}")
    await q.redis.hset(q.k.attempts, "j1", 1)
    await q.redis.hset(q.k.stalls, "j1", 1)
    await q.redis.hset(q.k.cancel, "j1", 1)  # a request that came as it finished
    await finish_in_turn(q, ["j3"], keep=[2, DAY_MS, 1000, DAY_MS])
    assert await q.zset(q.k.done) == ["j2", "j3"]
    for field in ("data", "queued", "attempts", "stalls", "defer", "result", "cancel"):
        assert not await q.redis.hexists(getattr(q.k, field), "j1"), field
    assert await q.redis.hexists(q.k.data, "j2") and await q.redis.hexists(q.k.result, "j2")
    assert await q.redis.hlen(q.k.runs) == 3  # run mirrors keep their own count


async def test_retention_of_a_large_count_trims_in_steps_of_a_fiftieth(q: Q) -> None:
    """keep 100: the count waits for an excess of 2 (100 / 50), then trims it whole."""
    keep = [100, DAY_MS, 1000, DAY_MS]
    await finish_in_turn(q, [f"j{i:03d}" for i in range(101)], keep=keep)
    assert len(await q.zset(q.k.done)) == 101  # one over: not trimmed yet
    await finish_in_turn(q, ["j101"], keep=keep)
    done = await q.zset(q.k.done)
    assert len(done) == 100 and done[0] == "j002"
    assert not await q.redis.hexists(q.k.data, "j000")
    assert not await q.redis.hexists(q.k.data, "j001")


async def test_a_finish_with_every_keep_empty_trims_nothing(q: Q) -> None:
    await finish_in_turn(q, ["j1", "j2"], keep=[1, DAY_MS, 1, DAY_MS])
    assert await q.zset(q.k.done) == ["j2"]
    await finish_in_turn(q, ["j3"], keep=["", "", "", ""])
    assert await q.zset(q.k.done) == ["j2", "j3"]  # left for a call that trims
    assert await q.zset(q.k.runs_idx) == ["j2#1", "j3#1"]


async def test_a_claim_leaves_the_marker_only_when_it_took_all_it_asked_for(q: Q) -> None:
    for job_id in ("a", "b", "c"):
        await q.enqueue(job_id)
    await q.redis.delete(q.k.marker)
    await q.claim(count=2)
    assert await q.redis.zscore(q.k.marker, "w") == 0  # took 2 of 2: more may be ready
    await q.redis.delete(q.k.marker)
    await q.claim(count=2)  # took the last one, of 2 asked
    assert await q.redis.zscore(q.k.marker, "w") is None


async def test_a_defer_that_would_run_a_cancelled_job_again_still_reads_the_request(
    q: Q,
) -> None:
    await q.enqueue("a")
    job_id, token = await q.claim_one()
    await q.redis.hset(q.k.cancel, "a", await q.now_ms() + 60_000)
    reply = await q.finish(["defer", job_id, token, 5_000, b'{"reason":"x"}', "", "", b'{"c":1}'])
    assert reply == [2]  # finished as cancelled
    assert await q.redis.hget(q.k.result, "a") == b'{"c":1}'
    assert not await q.redis.hexists(q.k.cancel, "a")  # the request it honoured is gone


async def test_retention_of_run_mirrors_and_by_age(q: Q) -> None:
    await finish_in_turn(q, ["j1", "j2"], keep=[1000, DAY_MS, 1, DAY_MS])
    assert await q.redis.hkeys(q.k.runs) == [b"j2#1"]
    assert await q.zset(q.k.runs_idx) == ["j2#1"]
    await finish_in_turn(q, ["j3"], keep=[1000, 0, 1000, DAY_MS])  # age 0: all finished go
    assert await q.zset(q.k.done) == []
    assert await q.redis.hlen(q.k.data) == 0 and await q.redis.hlen(q.k.result) == 0


def finish_args(
    action="finish", job_id="a", token="h:1", delay=0, payload=b"{}", cancelled=b""
) -> list:
    return [*KEEP, action, job_id, token, delay, payload, "", "", cancelled]


BAD_FINISH = {
    "no items": KEEP,
    "short item": finish_args()[:-1],
    "text keep": ["many", *finish_args()[1:]],
    "unknown action": finish_args(action="complete"),
    "empty id": finish_args(job_id=""),
    "empty token": finish_args(token=""),
    "empty payload": finish_args(payload=b""),
    "negative delay": finish_args(action="retry", delay=-1),
    "fractional delay": finish_args(action="defer", delay=0.5),
    "second item bad": [*finish_args(), *finish_args(action="bogus")[4:]],
    "keep partly empty": ["", *finish_args()[1:]],
}


@pytest.mark.parametrize("args", BAD_FINISH.values(), ids=BAD_FINISH.keys())
async def test_finish_bad_input_writes_nothing(q: Q, args) -> None:
    await q.enqueue("a")
    assert await q.claim_one() == ("a", "h:1")
    await assert_bad_input_writes_nothing(q, "job_finish", args)


# -- job_extend ----------------------------------------------------------------------------


async def test_extend_renews_held_locks(q: Q) -> None:
    await q.enqueue("a")
    await q.enqueue("b")
    reply = await q.claim(2, "h", 1000)
    now = await q.now_ms()
    pairs = [("a", reply[3]), ("b", reply[9])]
    assert await q.extend(60_000, *pairs) == [[], []]
    for job_id in ("a", "b"):
        assert now + 60_000 <= await q.redis.zscore(q.k.active, job_id) <= now + 61_000


async def test_extend_reports_lost_locks_without_renewing_them(q: Q) -> None:
    await q.enqueue("a")
    await q.enqueue("b")
    reply = await q.claim(2, "h", 1000)
    deadline = await q.redis.zscore(q.k.active, "a")
    b_tok = reply[9]
    reply = await q.extend(60_000, ("a", "h:999"), ("b", b_tok), ("gone", "h:1"))
    assert reply == [[b"a", b"gone"], []]
    assert await q.redis.zscore(q.k.active, "a") == deadline
    assert await q.redis.zscore(q.k.active, "b") > deadline
    assert await q.zset(q.k.active) == ["a", "b"]  # nothing added for the unknown id


async def test_extend_reports_live_cancel_requests_and_drops_stale_ones(q: Q) -> None:
    for job_id in ("a", "b", "c"):
        await q.enqueue(job_id)
    reply = await q.claim(3)
    tokens = dict(zip(reply[2::6], reply[3::6], strict=True))
    now = await q.now_ms()
    await q.redis.hset(q.k.cancel, mapping={"a": now + 60_000, "b": now - 1})
    pairs = [(job_id, tokens[job_id]) for job_id in (b"a", b"b", b"c")]
    assert await q.extend(60_000, *pairs) == [[], [b"a"]]
    assert await q.redis.hkeys(q.k.cancel) == [b"a"]


async def test_extend_never_revives_a_lock_whose_deadline_passed(q: Q) -> None:
    """Even before a sweep took it: the owner may already have stopped the run as lost."""
    await q.enqueue("a")
    await q.enqueue("b")
    reply = await q.claim(1, "h", 1)
    a_tok = reply[3]
    await eventually(lambda: _past(q, "a"))
    b_tok = (await q.claim(1, "h", 60_000))[3]
    assert await q.extend(60_000, ("a", a_tok), ("b", b_tok)) == [[b"a"], []]
    assert await q.redis.zscore(q.k.active, "a") < await q.now_ms()
    assert await q.redis.hget(q.k.lock, "a") == a_tok  # the sweep, not extend, takes it


async def _past(q: Q, job_id: str) -> bool:
    return await q.redis.zscore(q.k.active, job_id) < await q.now_ms()


BAD_EXTEND = {
    "no pairs": [1000],
    "odd pair": [1000, "a", "h:1", "b"],
    "zero lock": [0, "a", "h:1"],
    "text lock": ["long", "a", "h:1"],
    "empty id": [1000, "", "h:1"],
    "empty token": [1000, "a", ""],
}


@pytest.mark.parametrize("args", BAD_EXTEND.values(), ids=BAD_EXTEND.keys())
async def test_extend_bad_input_writes_nothing(q: Q, args) -> None:
    await q.enqueue("a")
    await q.claim_one()
    await q.redis.hset(q.k.cancel, "a", 1)  # stale: a valid call would drop it
    await assert_bad_input_writes_nothing(q, "job_extend", args)


# -- job_sweep -----------------------------------------------------------------------------


async def expired_claims(q: Q, count: int) -> list[str]:
    """Claim `count` jobs with a 1 ms lock and wait until server time is past it."""
    reply = await q.claim(count, "h", 1)
    await server_passes(q, reply[0] + 1)
    return [x.decode() for x in reply[2::6]]


async def test_sweep_requeues_expired_jobs_at_the_head(q: Q) -> None:
    await q.enqueue("a")
    await q.enqueue("b")
    assert await expired_claims(q, 2) == ["a", "b"]
    await q.enqueue("c")
    await q.redis.hset(q.k.cancel, "a", 1)
    await q.redis.delete(q.k.marker)
    assert await q.sweep(max_stalls=3) == [[b"a", b"b"], []]
    assert await q.wait_ids() == ["a", "b", "c"]
    assert await q.redis.hgetall(q.k.stalls) == {b"a": b"1", b"b": b"1"}
    assert not await q.redis.exists(q.k.lock) and not await q.redis.exists(q.k.cancel)
    assert await q.redis.zcard(q.k.active) == 0
    assert await q.redis.zscore(q.k.marker, "w") == 0
    assert (await q.claim(1))[2:6] == [b"a", b"h:3", 1, 1]


async def test_sweep_fails_a_job_past_max_stalls(q: Q) -> None:
    await q.enqueue("a")
    await expired_claims(q, 1)
    assert await q.sweep(max_stalls=1) == [[b"a"], []]
    await expired_claims(q, 1)
    assert await q.sweep(max_stalls=1, result=b'{"why":"stalled"}') == [[], [b"a"]]
    assert await q.state("a") == ["done"]
    assert await q.redis.hget(q.k.result, "a") == b'{"why":"stalled"}'
    assert await q.redis.hget(q.k.stalls, "a") == b"2"
    assert not await q.redis.hexists(q.k.lock, "a")


async def test_sweep_leaves_live_locks_and_respects_limit(q: Q) -> None:
    for job_id in ("a", "b", "c"):
        await q.enqueue(job_id)
    await expired_claims(q, 2)
    await q.claim_one(lock_ms=60_000)
    assert await q.sweep(limit=1) == [[b"a"], []]
    assert await q.sweep(limit=1) == [[b"b"], []]
    assert await q.sweep(limit=1) == [[], []]
    assert await q.zset(q.k.active) == ["c"]


BAD_SWEEP = {
    "negative max": [-1, 10, b"{}"],
    "text max": ["some", 10, b"{}"],
    "zero limit": [3, 0, b"{}"],
    "limit over 1000": [3, 1001, b"{}"],
    "empty result": [3, 10, b""],
}


@pytest.mark.parametrize("args", BAD_SWEEP.values(), ids=BAD_SWEEP.keys())
async def test_sweep_bad_input_writes_nothing(q: Q, args) -> None:
    await q.enqueue("a")
    await expired_claims(q, 1)
    await assert_bad_input_writes_nothing(q, "job_sweep", args)


# -- job_cancel ----------------------------------------------------------------------------


async def test_cancel_waiting_and_delayed_jobs_before_start(q: Q) -> None:
    await q.enqueue("w")
    await q.enqueue("d", delay=60_000)
    assert await q.cancel("w", b'{"c":"w"}', "w#1", b'{"r":"w"}') == [1]
    assert await q.cancel("d", b'{"c":"d"}', "d#1", b'{"r":"d"}') == [1]
    for job_id in ("w", "d"):
        assert await q.state(job_id) == ["done"]
        assert await q.redis.hget(q.k.result, job_id) == f'{{"c":"{job_id}"}}'.encode()
        assert await q.redis.hget(q.k.runs, f"{job_id}#1") == f'{{"r":"{job_id}"}}'.encode()
        assert await q.redis.zscore(q.k.runs_idx, f"{job_id}#1") is not None


async def test_cancel_running_job_names_the_claim_and_writes_nothing(q: Q) -> None:
    await q.enqueue("a")
    _, token = await q.claim_one()
    before = await q.snapshot()
    assert await q.cancel("a") == [2, token.encode()]
    assert await q.snapshot() == before


async def test_cancel_finished_job_writes_nothing(q: Q) -> None:
    await q.enqueue("a")
    job_id, token = await q.claim_one()
    await q.finish(["finish", job_id, token, 0, b"{}", "", "", ""])
    before = await q.snapshot()
    assert await q.cancel("a") == [3]
    assert await q.cancel("a") == [3]
    assert await q.snapshot() == before


async def test_cancel_unknown_job_is_not_found(q: Q) -> None:
    await q.enqueue("a")
    before = await q.snapshot()
    assert await q.cancel("nope") == NOT_FOUND
    assert await q.snapshot() == before


async def test_cancel_job_in_no_state_is_a_conflict(q: Q) -> None:
    await q.redis.hset(q.k.data, "debris", b"{}")
    before = await q.snapshot()
    assert await q.cancel("debris") == CONFLICT
    assert await q.snapshot() == before


BAD_CANCEL = {
    "empty id": ["", b"{}", "r#1", b"{}"],
    "empty result": ["a", b"", "r#1", b"{}"],
    "empty run id": ["a", b"{}", "", b"{}"],
    "empty run": ["a", b"{}", "r#1", b""],
}


@pytest.mark.parametrize("args", BAD_CANCEL.values(), ids=BAD_CANCEL.keys())
async def test_cancel_bad_input_writes_nothing(q: Q, args) -> None:
    await q.enqueue("a")
    await assert_bad_input_writes_nothing(q, "job_cancel", args)


MISSING_ARGS = {"cancel id only": ("job_cancel", ["w"]), "sweep no result": ("job_sweep", [0, 10])}


@pytest.mark.parametrize("name,args", MISSING_ARGS.values(), ids=MISSING_ARGS.keys())
async def test_missing_args_are_bad_input(q: Q, name, args) -> None:
    await q.enqueue("a")
    await expired_claims(q, 1)
    await q.enqueue("w")
    await assert_bad_input_writes_nothing(q, name, args)


# -- job_withdraw --------------------------------------------------------------------------


async def test_withdraw_takes_back_a_delayed_job_and_frees_its_id_and_dedup(q: Q) -> None:
    assert await q.enqueue("t", delay=60_000, dedup="k", window=60_000) == [1, b"t"]
    assert await q.call("job_withdraw", "t", "k") == 1
    assert await q.state("t") == []
    assert await q.redis.hget(q.k.dedup, "k") is None
    assert await q.redis.hget(q.k.queued, "t") is None
    # the same id and dedup key make a new job, not a duplicate of the withdrawn one
    assert await q.enqueue("t", delay=60_000, dedup="k", window=60_000) == [1, b"t"]


async def test_withdraw_leaves_a_job_that_was_claimed_or_is_not_delayed(q: Q) -> None:
    await q.enqueue("w")
    await q.enqueue("d", delay=60_000)
    await q.redis.hset(q.k.defer, "d", b"{}")  # picked up once and deferred
    await q.enqueue("a", delay=60_000)
    await q.redis.hset(q.k.attempts, "a", 1)  # retried: an attempt spent
    before = await q.snapshot()
    for job_id in ("w", "d", "a", "nope"):
        assert await q.call("job_withdraw", job_id, "") == 0
    assert await q.snapshot() == before


async def test_withdraw_keeps_a_dedup_key_another_job_holds(q: Q) -> None:
    await q.enqueue("first", delay=60_000, dedup="k", window=60_000)
    await q.enqueue("other", delay=60_000)
    assert await q.call("job_withdraw", "other", "k") == 1
    assert (await q.redis.hget(q.k.dedup, "k") or b"").endswith(b" first")


# -- job_cancel_request --------------------------------------------------------------------


async def test_cancel_request_for_the_current_claim(q: Q) -> None:
    await q.enqueue("a")
    job_id, token = await q.claim_one()
    now = await q.now_ms()
    assert await q.call("job_cancel_request", job_id, token, 5_000) == 1
    assert now + 5_000 <= int(await q.redis.hget(q.k.cancel, "a")) <= now + 6_000
    assert await q.extend(60_000, (job_id, token)) == [[], [b"a"]]


async def test_cancel_request_for_a_stale_claim_is_lock_lost(q: Q) -> None:
    await q.enqueue("a")
    job_id, token = await q.claim_one()
    before = await q.snapshot()
    assert await q.call("job_cancel_request", job_id, "h:99", 5_000) == LOST
    assert await q.call("job_cancel_request", "other", token, 5_000) == LOST
    assert await q.snapshot() == before
    await q.finish(["finish", job_id, token, 0, b"{}", "", "", ""])
    before = await q.snapshot()
    assert await q.call("job_cancel_request", job_id, token, 5_000) == LOST
    assert await q.snapshot() == before


BAD_CANCEL_REQUEST = {
    "empty id": ["", "h:1", 1000],
    "empty token": ["a", "", 1000],
    "zero ttl": ["a", "h:1", 0],
    "text ttl": ["a", "h:1", "long"],
}


@pytest.mark.parametrize("args", BAD_CANCEL_REQUEST.values(), ids=BAD_CANCEL_REQUEST.keys())
async def test_cancel_request_bad_input_writes_nothing(q: Q, args) -> None:
    await q.enqueue("a")
    assert await q.claim_one() == ("a", "h:1")
    await assert_bad_input_writes_nothing(q, "job_cancel_request", args)


# -- queue_unpause ------------------------------------------------------------------------


async def test_unpause_lifts_the_pause_it_names_and_wakes_the_daemons(q: Q) -> None:
    await q.redis.set(q.k.paused, "fleet:a1")
    assert await q.call("queue_unpause", "fleet:a1") == 1
    assert not await q.redis.exists(q.k.paused)
    assert await q.redis.zscore(q.k.marker, "w") == 0


@pytest.mark.parametrize("standing", ["fleet:b2", "1", None], ids=["newer", "by hand", "none"])
async def test_unpause_leaves_any_other_pause_and_writes_nothing(q: Q, standing) -> None:
    await q.enqueue("a")
    if standing is not None:
        await q.redis.set(q.k.paused, standing)
    before = await q.snapshot()
    assert await q.call("queue_unpause", "fleet:a1") == 0
    assert await q.snapshot() == before


BAD_UNPAUSE = {"empty mark": [""], "no mark": [], "two marks": ["fleet:a1", "fleet:b2"]}


@pytest.mark.parametrize("args", BAD_UNPAUSE.values(), ids=BAD_UNPAUSE.keys())
async def test_unpause_bad_input_writes_nothing(q: Q, args) -> None:
    await q.redis.set(q.k.paused, "fleet:a1")
    await assert_bad_input_writes_nothing(q, "queue_unpause", args)


# -- job_handback ---------------------------------------------------------------------------


async def test_handback_puts_live_claims_at_the_head_counting_nothing(q: Q) -> None:
    for job_id in ("a", "b", "c"):
        await q.enqueue(job_id)
    reply = await q.claim(2, "h", 60_000)
    (a, a_tok), (b, b_tok) = [(reply[i].decode(), reply[i + 1].decode()) for i in (2, 8)]
    await q.redis.hset(q.k.cancel, a, 1)
    await q.redis.delete(q.k.marker)
    assert await q.handback((a, a_tok), (b, b_tok)) == [[b"a", b"b"], []]
    assert await q.wait_ids() == ["a", "b", "c"]
    assert await q.redis.zcard(q.k.active) == 0
    assert not await q.redis.exists(q.k.lock) and not await q.redis.exists(q.k.cancel)
    assert await q.redis.zscore(q.k.marker, "w") == 0
    assert not await q.redis.exists(q.k.stalls) and not await q.redis.exists(q.k.attempts)
    assert (await q.claim(1))[2:6] == [b"a", b"h:3", 1, 0]  # first attempt, no stall


async def test_handback_leaves_claims_whose_lock_moved_on(q: Q) -> None:
    for job_id in ("a", "b", "c"):
        await q.enqueue(job_id)
    a, a_tok = await q.claim_one()
    b, b_tok = await q.claim_one()
    await q.finish(["finish", b, b_tok, 0, b"{}", "", "", ""])
    await q.redis.delete(q.k.marker)
    before = await q.snapshot()
    # a stale token, a finished claim, a job never claimed, an unknown id: nothing to give back
    assert await q.handback((a, "h:99"), (b, b_tok), ("c", "h:3"), ("x", "h:1")) == [[], []]
    assert await q.snapshot() == before
    assert await q.handback((a, a_tok), (a, a_tok)) == [[b"a"], []]  # named twice, pushed once
    assert await q.wait_ids() == ["a", "c"]


async def test_handback_of_an_expired_lock_not_yet_swept(q: Q) -> None:
    await q.enqueue("a")
    (a,) = await expired_claims(q, 1)
    assert await q.handback((a, "h:1")) == [[b"a"], []]
    assert await q.sweep() == [[], []]  # nothing left to count as a stall
    assert await q.state("a") == ["wait"]


async def test_handback_leaves_a_claim_whose_attempt_was_recorded(q: Q) -> None:
    for job_id in ("a", "b"):
        await q.enqueue(job_id)
    a, a_tok = await q.claim_one()
    assert await q.finish(["retry", a, a_tok, 60_000, b"{}", "a#1", b'{"n":1}', ""]) == [1]
    await q.redis.zadd(q.k.delayed, {"a": 0})  # due again: its second attempt
    tokens = dict([await q.claim_one() for _ in range(2)])
    (a2, a2_tok), (b, b_tok) = ("a", tokens["a"]), ("b", tokens["b"])
    # b's first attempt ended and was mirrored, but the daemon died before its finish landed
    await q.redis.hset(q.k.runs, "b#1", b'{"n":2}')
    before = await q.snapshot()
    assert await q.handback((b, b_tok)) == [[], [b"b"]]
    assert await q.snapshot() == before
    # a's recorded run was its first attempt: the second has none yet
    assert await q.handback((a2, a2_tok)) == [[b"a"], []]


BAD_HANDBACK = {
    "no pairs": [],
    "id without token": ["a"],
    "odd count": ["a", "h:1", "b"],
    "empty id": ["", "h:1"],
    "empty token": ["a", ""],
    "empty token later": ["a", "h:1", "b", ""],
}


@pytest.mark.parametrize("args", BAD_HANDBACK.values(), ids=BAD_HANDBACK.keys())
async def test_handback_bad_input_writes_nothing(q: Q, args) -> None:
    await q.enqueue("a")
    assert await q.claim_one() == ("a", "h:1")
    await assert_bad_input_writes_nothing(q, "job_handback", args)


# -- NaN slips past the numeric checks (Redis' Lua tonumber("nan") is a number) --------------

NAN_CASES = {
    "claim lock_ms": ("job_claim", [1, "h", "nan"]),
    "extend lock_ms": ("job_extend", ["nan", "a", "h:1"]),
    "cancel_request ttl": ("job_cancel_request", ["a", "h:1", "nan"]),
    "finish keep_done_ms": (
        "job_finish",
        [5, "nan", 5, DAY_MS, "finish", "a", "h:1", 0, "{}", "", "", ""],
    ),
    "sweep max_stalls": ("job_sweep", ["nan", 10, b"{}"]),
}


@pytest.mark.parametrize("name,args", NAN_CASES.values(), ids=NAN_CASES.keys())
async def test_nan_is_bad_input_and_writes_nothing(q: Q, name, args) -> None:
    await q.enqueue("a")
    assert await q.claim_one() == ("a", "h:1")
    await q.enqueue("b")
    await assert_bad_input_writes_nothing(q, name, args)
