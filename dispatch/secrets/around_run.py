"""A run with its secrets: resolved at start, hidden while it lasts, never in its result.

`run_with_secrets` sits between the processor and the runner. A job without references runs as
it is. Otherwise its references are resolved (dispatch.secrets.resolver) inside the job's
timeout: an abort (cancel, timeout, shutdown) kills the resolver and the run never starts; a
failure ends it unstarted with `secret-unresolved: <why>`, an infrastructure failure the
processor retries. The values go to the runner through `ctx.secrets` alone, are hidden from every
log line until the run is over, and the result's error text is scrubbed of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import msgspec

from dispatch import log
from dispatch.config.schemas import SecretProfile
from dispatch.log import event
from dispatch.reasons import ABORTED_BEFORE_START, SECRET_UNRESOLVED, with_error
from dispatch.runners.base import RunContext, RunResult
from dispatch.secrets.mask import forms
from dispatch.secrets.resolver import Aborted, Unresolved, resolve

Run = Callable[[RunContext], Awaitable[RunResult]]


async def run_with_secrets(
    ctx: RunContext, profiles: Mapping[str, SecretProfile], run: Run
) -> RunResult:
    refs = ctx.job.secret_refs()
    if not refs:
        return await run(ctx)
    try:
        values = await resolve(refs, profiles, ctx.signal)
    except Aborted:
        return RunResult(started=False, error=ABORTED_BEFORE_START)
    except Unresolved as exc:
        event("secret_unresolved", job=ctx.job.id, why=str(exc))
        return RunResult(started=False, error=with_error(SECRET_UNRESOLVED, exc))
    hidden = forms(values.values())
    log.hide(hidden)
    try:
        event("secrets_resolved", job=ctx.job.id, names=sorted(refs))
        ctx.secrets = values
        result = await run(ctx)
        return msgspec.structs.replace(result, error=log.scrub(result.error))
    finally:
        log.unhide(hidden)
