"""A job's story in words, as `dispatch why ID` tells it: the state and its reason, the
trigger that minted it, and what its wait-for conditions say now. The board (`top`) and the
web page tell the same one."""

from __future__ import annotations

from dispatch.cli import triggers, waits
from dispatch.client import Client, JobView
from dispatch.errors import NotFound
from dispatch.model import RunRecord


async def story(client: Client, job_id: str) -> str:
    return (await told(client, job_id))[2]


async def told(client: Client, job_id: str, last: int = 10) -> tuple[JobView, list[RunRecord], str]:
    """The job, its latest `last` attempts' records (oldest first) and its story; NotFound
    when no queue holds it. The records are the story's own: a caller that shows them too
    reads them once."""
    found = await client.get(job_id)
    if found is None:
        raise NotFound(f"no job {job_id}")
    runs = await client.records_of(found, last)
    text = await triggers.why(client, found, runs, False)
    wait = await client.wait_state(found)
    if wait is not None and found.state in ("waiting", "delayed", "active"):
        text += "\n" + waits.why_line(wait, client.clock.now_ms(), waits.local_zone())
    return found, runs, text
