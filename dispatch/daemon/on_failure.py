"""`DISPATCH_ON_FAILURE` and `DISPATCH_WEBHOOK_URL`: an operator told of each job that ended
wrong, by a command of theirs and by an HTTP POST.

It runs on the host that ends the job, once per qualifying ending, with the run record as JSON
on its stdin: an attempt that ended `failed`, or `infra` with no attempt left (the job is
finished, not retried), or `policy` after its spend was reserved (money was held for it). The
command is an absolute path and its arguments (split as a shell would, but never run by one),
with a bounded time (`DISPATCH_ON_FAILURE_TIMEOUT`, 10 s: then its process group is killed) and
an environment of PATH, LANG and DISPATCH_HOST only. Whatever it does is logged (`on_failure_ran`
or `on_failure_failed`) and never retried, and never changes the job.

The webhook POSTs the same record as JSON (through httpx, 10 s a try), with
`X-Dispatch-Signature: sha256=<hex>`, the HMAC-SHA256 of the body under
`DISPATCH_WEBHOOK_SECRET` when one is set; an answer other than 2xx, or none, is tried again
after 1, 2 and 4 s, and after the fourth try the record is dropped with one log line
(`webhook_dropped`).

Exactly once fleet-wide, each of the two: before it goes, a key named by the teller, the
record's run and its claim is set if absent (`SET NX`, kept a week). A host that settles a job
whose runner died ends it with that run's own record, so it finds the key taken when the first
host got that far, and takes it when it did not.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from dispatch.host.commands import kill_group
from dispatch.log import event
from dispatch.model import RunRecord, encoder
from dispatch.reasons import FAILED, INFRA, POLICY

KEEP_S = 7 * 86_400
WEBHOOK_BACKOFF_S = (1.0, 2.0, 4.0)  # between the four tries


def qualifies(action: str, record: RunRecord | None) -> bool:
    if action != "finish" or record is None:
        return False
    return record.outcome in (FAILED, INFRA) or (
        record.outcome == POLICY and record.budget_reserved
    )


class OnFailure:
    def __init__(
        self,
        redis: Redis,
        prefix: str,
        host: str,
        argv: tuple[str, ...] = (),
        timeout_s: float = 10.0,
        webhook: Webhook | None = None,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.host = host
        self.argv = argv
        self.timeout_s = timeout_s
        self.tellers: list[tuple[str, Callable[[RunRecord], Awaitable[None]]]] = []
        if argv:
            self.tellers.append(("command", self._run))
        if webhook is not None:
            self.tellers.append(("webhook", webhook.send))
        self._tasks: set[asyncio.Task[list[str]]] = set()

    def ended(self, action: str, record: RunRecord | None) -> None:
        """Told of every ending; a qualifying one is handed to a task of its own."""
        if record is None or not qualifies(action, record):
            return
        task = asyncio.get_running_loop().create_task(self.fire(record))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def fire(self, record: RunRecord) -> list[str]:
        """Tell each teller of `record` unless a host already did; the tellers this one used."""
        told = []
        for name, tell in self.tellers:
            key = f"{self.prefix}:told:{name}:{record.run_id}:{record.claim or '-'}"
            try:
                if not await self.redis.set(key, self.host, nx=True, ex=KEEP_S):
                    continue
            except Exception as exc:  # Redis away: not told, rather than perhaps told twice
                event("on_failure_failed", job=record.id, error=f"{type(exc).__name__}: {exc}")
                continue
            await tell(record)
            told.append(name)
        return told

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


class Webhook:
    def __init__(
        self, url: str, secret: str = "", backoff_s: tuple[float, ...] = WEBHOOK_BACKOFF_S
    ) -> None:
        self.url = url
        self.secret = secret
        self.backoff_s = backoff_s

    async def send(self, record: RunRecord) -> None:
        import httpx

        body = encoder.encode(record)
        headers = {"Content-Type": "application/json", "X-Dispatch-Event": "job-ended-wrong"}
        if self.secret:
            mac = hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
            headers["X-Dispatch-Signature"] = f"sha256={mac}"
        why = ""
        async with httpx.AsyncClient(timeout=10.0) as client:
            for wait in (*self.backoff_s, None):
                try:
                    answer = await client.post(self.url, content=body, headers=headers)
                    if answer.is_success:
                        event("webhook_sent", job=record.id, status=answer.status_code)
                        return
                    why = f"HTTP {answer.status_code}"
                except httpx.HTTPError as exc:
                    why = type(exc).__name__
                if wait is not None:
                    await asyncio.sleep(wait)
        event("webhook_dropped", job=record.id, error=why, tries=len(self.backoff_s) + 1)
