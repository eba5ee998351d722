"""`dispatch logs -f` on a real Redis, between a run's end mark and its finish: the run's output
is printed once while the job still shows active, and the follower ends with the job's exit
code once the finish lands (it once streamed the same run again, output and all)."""

from __future__ import annotations

import asyncio

import pytest

from dispatch.cli import logs
from dispatch.client import Client
from dispatch.model import Job, Result, encode_job, encoder
from dispatch.queue.transitions import Finish, NewJob, Queue
from dispatch.records.tail import Tails
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio


async def test_an_ended_run_is_printed_once_until_its_finish_lands(
    redis, prefix, capfdbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "BLOCK_MS", 50)
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob("j1", encode_job(Job(id="j1", command=["true"])))])
    (claim,) = (await queue.claim(1, "h1", 60_000)).claims
    tail = Tails(redis, prefix, cap=1024, ttl_s=60).open("jobs", "j1", claim.attempt, claim.token)
    assert tail is not None
    tail.feed(b"said once\n")
    await tail.close(5)  # the end mark is in; the finish is not
    follower = asyncio.create_task(logs.follow(Client(redis, prefix), "j1", None))
    printed = b""

    async def said() -> bool:
        nonlocal printed
        printed += capfdbinary.readouterr().out
        return b"said once" in printed

    await eventually(said, 5)
    for _ in range(5):  # several of the follower's looks at a job still active
        await asyncio.sleep(logs.BLOCK_MS / 1000)
        printed += capfdbinary.readouterr().out
    assert printed == b"said once\n" and not follower.done()
    result = Result(state="failed", outcome="failed", reason="exit-5", exit_code=5, host="h1")
    assert await queue.finish([Finish("finish", "j1", claim.token, encoder.encode(result))])
    assert await asyncio.wait_for(follower, 5) == 5
