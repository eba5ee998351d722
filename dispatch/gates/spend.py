"""Spend-cap gate, the last before the run: every scoped-limits row that matches the job (`*`,
its repo or folder, `project:<id>`, `model:<name>`) and every window and metric the row caps are
checked and reserved in ONE script call, all or nothing (`dispatch/spend/`).

- Within every cap: admitted; the reservation is held by the pickup. The processor settles it
  after the run; if no run starts, the hold's release gives it all back.
- Over a cap: refused, nothing counted: `over-budget` (a run cap of the `*` row), `scope-cap`
  (a run cap of any other row), `dollar-cap`, `daily-token-cap`. The sentence names the
  window, the ledger (a folder by its base name) and the cap.
- Inside a soft-hold band (from `softHoldPct` percent of a cap) and not urgent: deferred `soft-hold`
  until that window turns.

Last, after the host budget and the dirty-tree check: nothing is reserved for a job those
would have deferred or refused. A job no row matches costs no Redis call.

The rows are indexed once per snapshot by the one ledger each can match (`Rows`, a folder's
resolved), so a pickup reads only the rows on `*` and on its repo, folder, project and model,
and `counters` still decides each of them.
"""

from __future__ import annotations

import os

import anyio

from dispatch.clock import Clock
from dispatch.config.limits import parse_scope, zone
from dispatch.config.schemas import ConfigSnapshot, ScopedLimit
from dispatch.gates.base import ADMIT, Decision, Defer, PerSnapshot, Pickup, Refuse
from dispatch.reasons import DAILY_TOKEN_CAP, DOLLAR_CAP, OVER_BUDGET, SCOPE_CAP, SOFT_HOLD
from dispatch.spend.ledger import Blocked, SpendLedger, reservation_id
from dispatch.spend.plan import MICRO, Counter, Subject, counters, subject_of
from dispatch.spend.windows import local_text

MIN_HOLD_MS = 1_000


class SpendGate:
    name = "spend"

    def __init__(self, ledger: SpendLedger, clock: Clock) -> None:
        self.ledger = ledger
        self.clock = clock
        self._rows: PerSnapshot[tuple[ScopedLimit, ...], Rows] = PerSnapshot(
            Rows, ()
        )  # indexed once per snapshot, folders resolved

    def inert(self, config: ConfigSnapshot) -> bool:
        return not config.limits

    async def check(self, pickup: Pickup) -> Decision:
        config = pickup.config
        if not config.limits:
            return ADMIT
        found = await self._counters(pickup)
        if not found:
            return ADMIT
        claim = pickup.claim
        rid = reservation_id(claim.queue, claim.id, claim.attempt, claim.token)
        try:
            outcome = await self.ledger.reserve(rid, found, pickup.job.urgent)
        except BaseException:
            # the reply may be what was lost: give back whatever the call may have reserved
            # (a refund of nothing changes nothing); the processor defers redis-unavailable
            self.ledger.close_later(rid, [c.key for c in found], "refund", -1, 0)
            raise
        if isinstance(outcome, Blocked):
            return self._blocked(outcome, config.overlay.budget_tz)
        pickup.spend = outcome
        pickup.hold("spend", outcome.release)
        return ADMIT

    async def _counters(self, pickup: Pickup) -> list[Counter]:
        now = self.clock.now_ms()
        project = pickup.project.id if pickup.project else None
        subject = subject_of(pickup.job, pickup.real_folder, project, pickup.model)
        rows, folders = (await self._rows.of(pickup.config.limits)).matching(subject)
        if not rows:
            return []
        if not folders:
            return self._plan(pickup, subject, rows, now)
        # resolving folders touches the filesystem (maybe a slow mount): not on the loop
        return await anyio.to_thread.run_sync(self._plan, pickup, subject, rows, now)

    def _plan(
        self, pickup: Pickup, subject: Subject, rows: list[ScopedLimit], now_ms: int
    ) -> list[Counter]:
        overlay = pickup.config.overlay
        usd, tz = pickup.job.max_cost_usd, zone(overlay.budget_tz)
        return counters(rows, subject, usd, overlay, now_ms, tz, self.ledger.keys)

    def _blocked(self, b: Blocked, tz_name: str) -> Decision:
        c = b.counter
        if b.kind == "cap":
            sentence = f"Over the {c.window.kind} {_cap_words(c)}{_taken(b)}. Not run."
            return Refuse(_reason(c), sentence)
        turns = local_text(c.window.end_ms, zone(tz_name))
        delay = max(c.window.end_ms - self.clock.now_ms(), MIN_HOLD_MS)
        detail = (
            f"inside the soft-hold band of the {c.window.kind} {_cap_words(c)}: it starts at"
            f" {_amount(c, c.soft)}{_taken(b)}; waits until the {c.window.kind} turns at {turns}"
            " (an urgent job may use the band)"
        )
        return Defer(delay, SOFT_HOLD, detail=detail)


class Rows:
    """One snapshot's rows by the ledger each can match: (kind, value), a folder's value
    resolved and without a trailing slash, as `plan.matches` compares it. A row that does
    not parse matches nothing (the watcher never hands one over)."""

    def __init__(self, rows: tuple[ScopedLimit, ...]) -> None:
        self.rows = rows
        self.by_key: dict[tuple[str, str | None], list[int]] = {}
        for i, row in enumerate(rows):
            try:
                scope = parse_scope(row.scope)
            except ValueError:
                continue
            value = scope.value
            if scope.kind == "folder":
                value = os.path.realpath(value).rstrip("/")
            self.by_key.setdefault((scope.kind, value), []).append(i)

    def matching(self, subject: Subject) -> tuple[list[ScopedLimit], bool]:
        """The rows that may match the subject, in file order, and whether any is a folder's."""
        keys: list[tuple[str, str | None]] = [
            ("fleet", "*"),
            ("repo", subject.repo),  # None is no key: it finds nothing
            ("project", subject.project),
            ("model", subject.model),
        ]
        if subject.folder is not None:  # the folder and every prefix ending before a slash
            f = subject.folder
            keys += [("folder", f), *(("folder", f[:i]) for i, c in enumerate(f) if c == "/")]
        found = [(i, key[0]) for key in keys for i in self.by_key.get(key, ())]
        if not found:
            return [], False
        kinds = dict(found)  # a row is found by one key only
        return [self.rows[i] for i in sorted(kinds)], "folder" in kinds.values()


def _reason(c: Counter) -> str:
    if c.metric == "usd":
        return DOLLAR_CAP
    if c.metric == "tokens":
        return DAILY_TOKEN_CAP
    return OVER_BUDGET if c.ledger.scope.kind == "fleet" else SCOPE_CAP


_METRIC_WORDS = {"runs": "run", "usd": "dollar", "tokens": "token"}


def _cap_words(c: Counter) -> str:
    """'run cap for acme/web (10)', 'dollar cap for project web ($50.00)'."""
    return f"{_METRIC_WORDS[c.metric]} cap for {c.ledger.label} ({_amount(c, c.cap)})"


def _amount(c: Counter, value: int) -> str:
    return f"${value / MICRO:,.2f}" if c.metric == "usd" else f"{value:,}"


def _taken(b: Blocked) -> str:
    """What the counter holds now, when a cap's number alone does not explain the answer."""
    c = b.counter
    if c.metric == "usd":
        ask = f", and this job reserves {_amount(c, c.amount)}" if c.amount else ""
        return f": {_amount(c, b.used + b.held)} used or in flight{ask}"
    if c.metric == "tokens":
        return f": {b.used:,} tokens used"
    return ""
