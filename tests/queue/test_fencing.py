"""Fencing through `dispatch.queue.transitions.Queue`: only the current claim's token moves a job.

A token goes stale when its lock expired and the job was swept and claimed again, or when the
claim ended (finish, retry, defer). A stale token can neither finish, retry, defer, extend nor
ask for a cancel, and changes nothing; the current token can.
"""

from __future__ import annotations

import pytest

from dispatch.errors import LockLost
from dispatch.queue.transitions import Action, Claim, Finish, NewJob, Queue
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio

ACTIONS: list[Action] = ["finish", "retry", "defer"]


@pytest.fixture
def queue(redis, prefix) -> Queue:
    return Queue(redis, "jobs", prefix)


async def snapshot(queue: Queue) -> dict[bytes | str, bytes | None]:
    keys = sorted(await queue.redis.keys(f"*{queue.prefix}*"))
    return {key: await queue.redis.dump(key) for key in keys}


async def claim_one(queue: Queue, lock_ms: int = 60_000, host: str = "h") -> Claim:
    batch = await queue.claim(1, host, lock_ms)
    assert len(batch.claims) == 1, batch
    return batch.claims[0]


async def sweep_until_requeued(queue: Queue, job_id: str) -> None:
    """The lock was taken for 1 ms; server time decides when the sweep sees it expired."""

    async def requeued() -> bool:
        ids, failed = await queue.sweep(max_stalls=5, result=b"{}")
        assert not failed
        return job_id in ids

    await eventually(requeued, timeout=5.0, every=0.005)


def ending(action: Action, claim: Claim) -> Finish:
    delay = 60_000 if action != "finish" else 0
    return Finish(action, claim.id, claim.token, b'{"by":"' + claim.token.encode() + b'"}', delay)


async def stale_after_sweep(queue: Queue) -> tuple[Claim, Claim]:
    await queue.enqueue([NewJob("a", b"{}")])
    stale = await claim_one(queue, lock_ms=1)
    await sweep_until_requeued(queue, "a")
    current = await claim_one(queue)
    assert current.id == "a" and current.token != stale.token and current.stalls == 1
    return stale, current


async def assert_stale(queue: Queue, stale: Claim) -> None:
    """Every transition with `stale` is refused and nothing changes."""
    before = await snapshot(queue)
    for action in ACTIONS:
        assert await queue.finish([ending(action, stale)]) == [False], action
    assert await queue.extend([(stale.id, stale.token)], 60_000) == ([stale.id], [])
    with pytest.raises(LockLost):
        await queue.request_cancel(stale.id, stale.token, 5_000)
    assert await snapshot(queue) == before


async def test_stale_token_after_sweep_and_reclaim_changes_nothing(queue: Queue) -> None:
    stale, current = await stale_after_sweep(queue)
    await assert_stale(queue, stale)
    assert await queue.redis.hget(queue.keys.lock, "a") == current.token.encode()


@pytest.mark.parametrize("action", ACTIONS)
async def test_current_token_after_reclaim_can_end_the_claim(queue: Queue, action) -> None:
    stale, current = await stale_after_sweep(queue)
    assert await queue.extend([(current.id, current.token)], 60_000) == ([], [])
    await queue.request_cancel(current.id, current.token, 5_000)
    assert await queue.extend([(current.id, current.token)], 60_000) == ([], ["a"])
    assert await queue.finish([ending(action, current)]) == [True]
    target = queue.keys.done if action == "finish" else queue.keys.delayed
    assert await queue.redis.zscore(target, "a") is not None
    assert await queue.redis.zcard(queue.keys.active) == 0
    await assert_stale(queue, current)  # once ended, the current token is stale too
    await assert_stale(queue, stale)


@pytest.mark.parametrize("action", ACTIONS)
async def test_token_is_stale_once_its_claim_ended(queue: Queue, action) -> None:
    await queue.enqueue([NewJob("a", b"{}")])
    claim = await claim_one(queue)
    assert await queue.finish([ending(action, claim)]) == [True]
    await assert_stale(queue, claim)


async def test_stale_token_after_retry_and_reclaim(queue: Queue) -> None:
    await queue.enqueue([NewJob("a", b"{}")])
    first = await claim_one(queue)
    assert await queue.finish([Finish("retry", "a", first.token, b"{}", 0)]) == [True]
    second = await claim_one(queue)  # the retry was due at once: promoted and claimed
    assert (second.id, second.attempt) == ("a", 2)
    await assert_stale(queue, first)
    assert await queue.finish([ending("finish", second)]) == [True]


async def test_same_host_reclaim_gets_a_new_token(queue: Queue) -> None:
    stale, current = await stale_after_sweep(queue)
    assert stale.token.rpartition(":")[0] == current.token.rpartition(":")[0] == "h"
    assert int(current.token.rpartition(":")[2]) > int(stale.token.rpartition(":")[2])


async def test_token_of_one_job_does_not_fence_another(queue: Queue) -> None:
    await queue.enqueue([NewJob("a", b"{}"), NewJob("b", b"{}")])
    batch = await queue.claim(2, "h", 60_000)
    a, b = batch.claims
    before = await snapshot(queue)
    assert await queue.finish([Finish("finish", "a", b.token, b"{}")]) == [False]
    assert await queue.extend([("b", a.token)], 60_000) == (["b"], [])
    assert await snapshot(queue) == before


async def test_finish_and_claim_refuses_stale_and_still_claims(queue: Queue) -> None:
    stale, current = await stale_after_sweep(queue)
    await queue.enqueue([NewJob("b", b"{}")])
    ended, batch = await queue.finish_and_claim([ending("finish", stale)], 5, "h", 60_000)
    assert ended == [False]
    assert [c.id for c in batch.claims] == ["b"]
    assert await queue.redis.hget(queue.keys.lock, "a") == current.token.encode()
    ended, batch = await queue.finish_and_claim(
        [ending("finish", current), ending("finish", stale)], 5, "h", 60_000
    )
    assert ended == [True, False] and batch.claims == []
    assert await queue.redis.zscore(queue.keys.done, "a") is not None


async def test_a_host_finds_its_claims_and_hands_back_only_current_ones(queue: Queue) -> None:
    await queue.enqueue([NewJob(i, b"{}") for i in ("a", "b", "c")])
    mine = await claim_one(queue, host="h1")
    await claim_one(queue, host="h10")  # a name that h1 is a prefix of is another host
    stale = await claim_one(queue, lock_ms=1, host="h1")
    await sweep_until_requeued(queue, stale.id)
    again = await claim_one(queue, host="h2")
    assert again.id == stale.id
    assert await queue.claims_of("h1") == [(mine.id, mine.token)]
    handed = await queue.hand_back([(mine.id, mine.token), (stale.id, stale.token)])
    assert handed == ([mine.id], [])
    assert await queue.claims_of("h1") == []
    assert await queue.hand_back([]) == ([], [])
    (back,) = (await queue.claim(1, "h3", 60_000)).claims
    assert (back.id, back.attempt, back.stalls) == (mine.id, 1, 0)


def run_of(claim: Claim, outcome: str) -> bytes:
    return (
        f'{{"id":"{claim.id}","attempt":{claim.attempt},"outcome":"{outcome}",'
        f'"claim":"{claim.token}"}}'
    ).encode()


async def test_a_claim_is_held_back_only_by_a_record_of_its_own_run(queue: Queue) -> None:
    """A claim whose own run was recorded before its finish landed lapses (the settled gate
    ends it as recorded); a record an earlier claim of the attempt left, a stopped run's, does
    not hold the claim: it is handed back. Before, any record of the attempt held it, so a
    claim after a `shutdown` hand-back lapsed and cost a stall instead."""
    await queue.enqueue([NewJob("a", b"{}"), NewJob("b", b"{}")])
    first = await claim_one(queue)
    stopped = Finish("defer", "a", first.token, b"{}", 0, run_id="a#1", run=run_of(first, "infra"))
    assert await queue.finish([stopped]) == [True]
    b = await claim_one(queue)
    again = await claim_one(queue)
    assert (again.id, again.attempt) == ("a", 1)
    await queue.redis.hset(queue.keys.runs, "b#1", run_of(b, "completed"))
    assert await queue.hand_back([(again.id, again.token), (b.id, b.token)]) == (["a"], ["b"])
