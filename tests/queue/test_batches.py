"""Batches past the scripts' bound of 1,000 items per call, through `Queue`, and what a refused
call raises: `BadCall`, which is no Redis fault, after writing nothing.

A split batch goes in calls of at most 1,000, in order, each atomic. A later call of an
enqueue that fails raises `EnqueueIncomplete` with the answers of the calls that landed.
"""

from __future__ import annotations

import pytest
from redis.exceptions import RedisError

from dispatch.errors import BadCall, InvalidJob
from dispatch.queue.faults import REDIS_FAULTS
from dispatch.queue.scripts import script
from dispatch.queue.transitions import (
    MAX_ITEMS,
    SMALL_CALL,
    Claim,
    EnqueueIncomplete,
    Finish,
    NewJob,
    Queue,
    Retention,
)

pytestmark = pytest.mark.anyio

DOC = b'{"id":"x"}'


@pytest.fixture
def queue(redis, prefix) -> Queue:
    return Queue(redis, "jobs", prefix)


async def snapshot(queue: Queue) -> dict[bytes, bytes | None]:
    keys = [k async for k in queue.redis.scan_iter(match=f"*{queue.prefix}*", count=1000)]
    return {key: await queue.redis.dump(key) for key in sorted(keys)}


def jobs(n: int, tag: str = "j", dedup: str = "k") -> list[NewJob]:
    return [NewJob(f"{tag}{i}", DOC, dedup=f"{dedup}{i}", dedup_window_ms=60_000) for i in range(n)]


async def claim_all(queue: Queue, n: int) -> list[Claim]:
    claims: list[Claim] = []
    while len(claims) < n:
        batch = await queue.claim(MAX_ITEMS, "h", 60_000)
        assert batch.claims, f"{len(claims)} of {n} claimed"
        claims += batch.claims
    return claims


@pytest.mark.parametrize("n", [2_500, 4_500])
async def test_a_large_enqueue_with_dedup_keys_lands_and_dedups(queue: Queue, n) -> None:
    """One call of 4,500 failed at `unpack` after writing every dedup entry."""
    answers = await queue.enqueue(jobs(n))
    assert [(a.id, a.created) for a in answers] == [(f"j{i}", True) for i in range(n)]
    assert await queue.redis.llen(queue.keys.wait) == n
    again = await queue.enqueue(jobs(n, tag="other"))
    assert [(a.id, a.created, a.taken) for a in again] == [
        (f"j{i}", False, False) for i in range(n)
    ]
    assert await queue.redis.llen(queue.keys.wait) == n


async def test_a_refused_first_call_raises_bad_call_and_writes_nothing(queue: Queue) -> None:
    await queue.enqueue(jobs(3, tag="seed"))
    before = await snapshot(queue)
    bad = [*jobs(5), NewJob("bad id", DOC)]
    with pytest.raises(BadCall, match="enqueue: refused as a bad call") as caught:
        await queue.enqueue(bad)
    assert await snapshot(queue) == before
    # not a Redis fault: no fault handler may retry it; a bad job at the CLI is still exit 2
    assert not isinstance(caught.value, (RedisError, *REDIS_FAULTS))
    assert isinstance(caught.value, InvalidJob)


async def test_a_later_call_refused_reports_what_was_written(queue: Queue) -> None:
    batch = [*jobs(1_200), NewJob("j1200", DOC, due_ms=10**15)]
    with pytest.raises(EnqueueIncomplete) as caught:
        await queue.enqueue(batch)
    assert isinstance(caught.value.__cause__, BadCall)
    assert [a.id for a in caught.value.done] == [f"j{i}" for i in range(MAX_ITEMS)]
    assert caught.value.pending == batch[MAX_ITEMS:]
    assert await queue.redis.llen(queue.keys.wait) == MAX_ITEMS
    assert await queue.redis.hlen(queue.keys.dedup) == MAX_ITEMS


async def test_large_finish_extend_and_hand_back_split_their_calls(queue: Queue) -> None:
    n = 2_300
    await queue.enqueue(jobs(n))
    claims = await claim_all(queue, n)
    pairs = [(c.id, c.token) for c in claims]
    assert await queue.extend(pairs, 120_000) == ([], [])
    handed, recorded = await queue.hand_back(pairs[:1_500])
    assert (len(handed), recorded) == (1_500, [])
    held = claims[1_500:] + await claim_all(queue, 1_500)
    ended = await queue.finish([Finish("finish", c.id, c.token, b"{}") for c in held])
    assert ended == [True] * n
    assert await queue.redis.zcard(queue.keys.done) == n
    assert await queue.redis.zcard(queue.keys.active) == 0


async def test_finish_and_claim_past_the_bound_ends_every_claim(queue: Queue) -> None:
    await queue.enqueue(jobs(1_300))
    claims = await claim_all(queue, 1_200)
    items = [Finish("finish", c.id, c.token, b"{}") for c in claims]
    ended, batch = await queue.finish_and_claim(items, 50, "h", 60_000)
    assert ended == [True] * len(claims)
    assert len(batch.claims) == 1_300 - len(claims)


async def test_a_refused_finish_hands_back_the_claims_it_came_with(queue: Queue) -> None:
    """In the hot path the finish and the next claim share one round trip: when the finish is
    refused, the jobs the claim took go back to the head of wait at once, nothing counted."""
    await queue.enqueue(jobs(4))
    (held,) = (await queue.claim(1, "h", 60_000)).claims
    bad = Finish("finish", held.id, held.token, b"not json")
    with pytest.raises(BadCall):
        await queue.finish_and_claim([bad], 2, "h", 60_000)
    assert await queue.claims() == [(held.id, held.token)]
    assert await queue.redis.lrange(queue.keys.wait, 0, -1) == [b"j1", b"j2", b"j3"]
    again = await queue.claim(1, "h", 60_000)
    assert (again.claims[0].id, again.claims[0].attempt, again.claims[0].stalls) == ("j1", 1, 0)


async def test_a_script_missing_from_the_server_reruns_only_its_own_call(queue: Queue) -> None:
    """After a restart the server may hold one script and not the other: the claim that ran
    must not run again, or the jobs it took would be held by nobody."""
    await queue.enqueue(jobs(3))
    (held,) = (await queue.claim(1, "h", 60_000)).claims
    await queue.redis.script_flush()
    await queue.redis.script_load(script("job_claim").source)
    ending = Finish("finish", held.id, held.token, b"{}")
    ended, batch = await queue.finish_and_claim([ending], 2, "h", 60_000)
    assert ended == [True]
    assert sorted((c.id, c.token) for c in batch.claims) == sorted(await queue.claims())
    assert [c.id for c in batch.claims] == ["j1", "j2"]


async def test_retention_runs_on_every_third_small_finish_call(redis, prefix) -> None:
    """Keep one finished job: calls that skip retention leave more, the third one trims."""
    queue = Queue(redis, "jobs", prefix, Retention(keep_done=1))
    done = []
    for tag in "abcde":
        await queue.enqueue([NewJob(tag, DOC)])
        (claim,) = (await queue.claim(1, "h", 60_000)).claims
        assert await queue.finish([Finish("finish", claim.id, claim.token, b"{}")]) == [True]
        done.append(await redis.zcard(queue.keys.done))
    assert done == [1, 2, 3, 1, 2]


async def test_a_large_finish_call_always_trims(redis, prefix) -> None:
    queue = Queue(redis, "jobs", prefix, Retention(keep_done=10))
    for round_ in range(2):
        await queue.enqueue(jobs(SMALL_CALL, tag=f"r{round_}-", dedup=f"d{round_}-"))
        claims = (await queue.claim(SMALL_CALL, "h", 60_000)).claims
        ended = [Finish("finish", c.id, c.token, b"{}") for c in claims]
        assert all(await queue.finish(ended))
        assert await redis.zcard(queue.keys.done) == 10
