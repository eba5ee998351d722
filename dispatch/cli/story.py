"""A job's story in words, as `dispatch why ID` tells it: the state and its reason, the
trigger that minted it, and what its wait-for conditions say now. The board (`top`) and the
web page tell the same one."""

from __future__ import annotations

from dispatch.cli import triggers, waits
from dispatch.client import Client, JobView
from dispatch.errors import NotFound


async def story(client: Client, job_id: str) -> str:
    return (await told(client, job_id))[1]


async def told(client: Client, job_id: str) -> tuple[JobView, str]:
    """The job and its story; NotFound when no queue holds it."""
    found = await client.get(job_id)
    if found is None:
        raise NotFound(f"no job {job_id}")
    text = await triggers.why(client, found, await client.records_of(found), False)
    wait = await client.wait_state(found)
    if wait is not None and found.state in ("waiting", "delayed", "active"):
        text += "\n" + waits.why_line(wait, client.clock.now_ms(), waits.local_zone())
    return found, text
