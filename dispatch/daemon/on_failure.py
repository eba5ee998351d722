"""`DISPATCH_ON_FAILURE`: an operator's command, told of each job that ended wrong.

It runs on the host that ends the job, once per qualifying ending, with the run record as JSON
on its stdin: an attempt that ended `failed`, or `infra` with no attempt left (the job is
finished, not retried), or `policy` after its spend was reserved (money was held for it). The
command is an absolute path and its arguments (split as a shell would, but never run by one),
with a bounded time (`DISPATCH_ON_FAILURE_TIMEOUT`, 10 s: then its process group is killed) and
an environment of PATH, LANG and DISPATCH_HOST only. Whatever it does is logged (`on_failure_ran`
or `on_failure_failed`) and never retried, and never changes the job.

Exactly once fleet-wide: before it runs, a key named by the record's run and claim is set if
absent (`SET NX`, kept a week). A host that settles a job whose runner died ends it with that
run's own record, so it finds the key taken when the first host got that far, and takes it when
it did not.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from redis.asyncio import Redis

from dispatch.host.commands import kill_group
from dispatch.log import event
from dispatch.model import RunRecord, encoder
from dispatch.reasons import FAILED, INFRA, POLICY

KEEP_S = 7 * 86_400


def qualifies(action: str, record: RunRecord | None) -> bool:
    if action != "finish" or record is None:
        return False
    return record.outcome in (FAILED, INFRA) or (
        record.outcome == POLICY and record.budget_reserved
    )


class OnFailure:
    def __init__(
        self, redis: Redis, prefix: str, host: str, argv: tuple[str, ...], timeout_s: float
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.host = host
        self.argv = argv
        self.timeout_s = timeout_s
        self._tasks: set[asyncio.Task[bool]] = set()

    def ended(self, action: str, record: RunRecord | None) -> None:
        """Told of every ending; a qualifying one is handed to a task of its own."""
        if record is None or not qualifies(action, record):
            return
        task = asyncio.get_running_loop().create_task(self.fire(record))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def fire(self, record: RunRecord) -> bool:
        """Run the command for `record` unless a host already did; whether this one did."""
        key = f"{self.prefix}:on-failure:{record.run_id}:{record.claim or '-'}"
        try:
            if not await self.redis.set(key, self.host, nx=True, ex=KEEP_S):
                return False
        except Exception as exc:  # Redis away: not run, rather than perhaps run twice
            event("on_failure_failed", job=record.id, error=f"{type(exc).__name__}: {exc}")
            return False
        await self._run(record)
        return True

    async def _run(self, record: RunRecord) -> None:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG")}
        env["DISPATCH_HOST"] = self.host
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            event("on_failure_failed", job=record.id, error=f"{type(exc).__name__}: {exc}")
            return
        try:
            await asyncio.wait_for(proc.communicate(encoder.encode(record)), self.timeout_s)
        except TimeoutError:
            kill_group(proc.pid)
            with contextlib.suppress(Exception):
                await proc.wait()
            event("on_failure_failed", job=record.id, error=f"timed out after {self.timeout_s:g} s")
            return
        if proc.returncode:
            event("on_failure_failed", job=record.id, error=f"exit {proc.returncode}")
        else:
            event("on_failure_ran", job=record.id, outcome=record.outcome, reason=record.reason)

    async def settle(self) -> None:
        """Let commands under way finish (bounded by their timeout) before the loop closes."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
