"""A job's output on its page, live: what the run's tail in Redis holds (dispatch/records/
tail.py), then each new chunk as it comes, as server-sent events, until the run's end mark.
The run is the one `dispatch logs` would pick: running now, else the latest recorded. A job
not started yet is looked at once a second until it starts or ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from dispatch.cli.logs import BLOCK_MS, ENDED, Run, run_of
from dispatch.client import Client, JobView
from dispatch.web.feed import event

MOST = 100  # entries per read


async def follow(client: Client, view: JobView) -> AsyncIterator[str]:
    run = await run_of(client, view, None)
    while run is None:
        if view.state in ENDED:
            yield event("end", "it ended without a run")
            return
        yield ": waiting for its run\n\n"
        found = await client.get(view.id)
        if found is None:
            yield event("end", "the job is gone")
            return
        view = found
        run = await run_of(client, view, None)
        if run is None:
            await asyncio.sleep(BLOCK_MS / 1000)
    async for part in _stream(client, view, run):
        yield part


async def _stream(client: Client, view: JobView, run: Run) -> AsyncIterator[str]:
    key, last = run.key(client.prefix, view.id), "0-0"
    while True:
        found: Any = await client.redis.xread({key: last}, count=MOST, block=BLOCK_MS)
        for _, entries in found:
            for entry_id, fields in entries:
                last = entry_id
                if b"end" in fields:
                    code = fields[b"end"].decode() or "none"
                    yield event("end", f"attempt {run.attempt} ended, exit code {code}")
                    return
                yield event("output", fields.get(b"d", b"").decode(errors="replace"))
        if not found:
            now = await client.get(view.id)
            if now is None or now.state != "active" or now.token != run.token:
                yield event("end", f"attempt {run.attempt} is no longer running")
                return
            yield ": still running\n\n"
