"""`Client.cancel`: a job not yet started is recorded cancelled at the client's clock; for a
running one it waits the whole `wait_s` for the owner's acknowledgement, even past redis-py's
default 5 s socket timeout (which once cut a loaded host's late acknowledgement short). A job
that moves while it looks (its claim ends before the request lands, or as it lands) is looked
at again, and ends cancelled rather than run once more."""

from __future__ import annotations

import anyio
import pytest

from dispatch.client import Client
from dispatch.clock import FakeClock
from dispatch.model import DeferRecord, Job, Result, encode_job, encoder, iso
from dispatch.queue import keys
from dispatch.queue.transitions import Finish, NewJob, Queue
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio


async def test_a_job_cancelled_before_start_ends_at_the_clients_clock(redis, prefix) -> None:
    clock = FakeClock(start_ms=1_700_000_123_000)
    await Queue(redis, "jobs", prefix).enqueue(
        [NewJob("j1", encode_job(Job(id="j1", command=["true"])))]
    )
    client = Client(redis, prefix, "cli", clock=clock)
    assert (await client.cancel("j1")).outcome == "cancelled"
    (record,) = await client.runs()
    assert (record.reason, record.ended_at) == ("operator-cancel", iso(1_700_000_123_000))


@pytest.mark.slow
async def test_a_late_acknowledgement_is_still_taken(redis, prefix) -> None:
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob("j1", encode_job(Job(id="j1", command=["true"])))])
    (claim,) = (await queue.claim(1, "slow-host", 60_000)).claims
    await redis.set(keys.host_alive("slow-host", prefix), 1, px=60_000)

    async def acknowledge_late() -> None:
        await anyio.sleep(6)  # the scenario: a host that answers after 6 s
        await redis.lpush(queue.keys.ack(claim.id), "slow-host")

    async with anyio.create_task_group() as tg:
        tg.start_soon(acknowledge_late)
        answer = await Client(redis, prefix).cancel("j1", wait_s=9)
    assert (answer.outcome, answer.host) == ("taken", "slow-host")


async def submit_and_claim(redis, prefix: str, host: str = "h") -> tuple[Queue, str]:
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob("j1", encode_job(Job(id="j1", command=["true"])))])
    (claim,) = (await queue.claim(1, host, 60_000)).claims
    await redis.set(keys.host_alive(host, prefix), 1, px=60_000)
    return queue, claim.token


class MovingQueue(Queue):
    """Its first look at the running job is followed at once by the claim ending in a defer,
    before the cancel request can land: the race `cancel` must look at again."""

    moved = False

    async def cancel(self, job_id: str, result: bytes, run_id: str, run: bytes) -> tuple[int, str]:
        code, token = await super().cancel(job_id, result, run_id, run)
        if code == 2 and not self.moved:
            self.moved = True
            deferral = encoder.encode(DeferRecord(reason="scope-folder", until="", at=""))
            await self.finish([Finish("defer", job_id, token, deferral, 60_000)])
        return code, token


async def test_a_claim_that_ends_between_the_look_and_the_request_is_looked_at_again(
    redis, prefix
) -> None:
    await submit_and_claim(redis, prefix)
    moving = MovingQueue(redis, "jobs", prefix)

    class Racing(Client):
        def queue(self, name: str) -> Queue:
            return moving

    answer = await Racing(redis, prefix, "cli").cancel("j1", wait_s=5)
    assert moving.moved and answer.outcome == "cancelled"
    view = await Client(redis, prefix).get("j1")
    assert view is not None and (view.state, view.reason) == ("cancelled", "operator-cancel")


async def test_a_run_ending_in_retry_while_the_request_stands_ends_cancelled(redis, prefix) -> None:
    queue, token = await submit_and_claim(redis, prefix, "h")
    ending = Result(state="cancelled", outcome="cancelled", reason="operator-cancel", host="h")

    async def owner_retries_as_the_request_lands() -> None:
        await eventually(lambda: redis.hexists(queue.keys.cancel, "j1"), 5, every=0.005)
        retry = Finish("retry", "j1", token, b"{}", 60_000, cancelled=encoder.encode(ending))
        assert await queue.finish([retry]) == [True]

    async with anyio.create_task_group() as tg:
        tg.start_soon(owner_retries_as_the_request_lands)
        answer = await Client(redis, prefix, "cli").cancel("j1", wait_s=5)
    assert (answer.outcome, answer.host) == ("cancelled", "h")
    view = await Client(redis, prefix).get("j1")
    assert view is not None and (view.state, view.attempt) == ("cancelled", 1)  # none spent
