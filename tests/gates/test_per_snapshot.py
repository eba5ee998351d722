"""What a gate works out from a snapshot's rows is worked out once per snapshot, however many
pickups ask at once, and again for the next snapshot."""

from __future__ import annotations

import threading

import anyio
import pytest

from dispatch.gates.base import PerSnapshot

pytestmark = pytest.mark.anyio


async def test_pickups_arriving_together_wait_for_one_working_out() -> None:
    worked: list[tuple[str, ...]] = []
    release = threading.Event()

    def work(rows: tuple[str, ...]) -> int:
        if rows:  # the first snapshot's: every other pickup arrives while this one runs
            release.wait(10)
        worked.append(rows)
        return len(rows)

    cache: PerSnapshot[tuple[str, ...], int] = PerSnapshot(work, ())
    rows = ("a", "b", "c")
    seen: list[int] = []

    async def pickup() -> None:
        seen.append(await cache.of(rows))

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(pickup)
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert seen == [3] * 20
    assert worked == [(), rows]  # the empty one at construction, then this snapshot's once
    assert await cache.of(rows) == 3 and len(worked) == 2
    assert await cache.of(("a",)) == 1 and len(worked) == 3  # a new file is a new tuple
    assert await cache.of(rows) == 3 and len(worked) == 4  # rows told apart by identity only
