"""One-call helpers over `Client` for scripts: each opens a client from the environment,
does one thing, and closes it. Tools that make many calls should hold a `Client` instead."""

from __future__ import annotations

from typing import Any

from dispatch.client import CancelAnswer, Client, JobView
from dispatch.model import Job
from dispatch.queue.transitions import Enqueued


async def submit(job: Job, **options: Any) -> Enqueued:
    async with Client.from_env() as client:
        return await client.submit(job, **options)


async def get(job_id: str) -> JobView | None:
    async with Client.from_env() as client:
        return await client.get(job_id)


async def cancel(job_id: str, wait_s: float = 10.0) -> CancelAnswer:
    async with Client.from_env() as client:
        return await client.cancel(job_id, wait_s)


async def list_jobs(state: str | None = None, limit: int = 200) -> list[JobView]:
    async with Client.from_env() as client:
        return await client.list(state, limit)
