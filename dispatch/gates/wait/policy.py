"""The wait gate's arithmetic, as pure functions: how long a job waits between checks, after a
denied check slot, and what a hold's counters decide. No I/O and no clock: the gate passes
`now`, the time held so far and a random source, so a day of checks is a loop in a test.

Backoff. Checks come every `DISPATCH_WAIT_INTERVAL` (at least 30 s); once the job has held
for ten intervals the interval doubles, and it is never longer than 15 minutes. Every delay
gets up to 10% jitter on top, so jobs deferred together do not come back together.

After a check that held (not yet, or could not tell), in this order:
  faults in a row >= max faults                -> refuse `wait-unanswerable`
  checks (this one included) >= max checks     -> refuse `wait-expired`
  held >= max wait                             -> refuse `wait-expired`
  else defer by backoff + jitter, clamped to what is left of the max wait, at least 1 s.
The bounds are judged after the check, never before it, so a condition that clears on the
deciding check still runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from dispatch.config.settings import Settings
from dispatch.gates.base import WAIT_THROTTLE_DELAY_MS

Random = Callable[[], float]  # a float in [0, 1), like random.random

BACKOFF_CAP_MS = 15 * 60_000
DOUBLE_AFTER_PERIODS = 10
JITTER = 0.1
MIN_HOLD_MS = 1_000
AFTER_MARGIN_MS = 1_000  # an `after` this close (or past) has arrived: no defer to a past instant
THROTTLE_ALARM = 5  # denied check slots in a row before the operator is told, once


@dataclass(frozen=True, slots=True)
class WaitLimits:
    interval_ms: int = 60_000
    max_ms: int = 86_400_000
    max_checks: int = 96
    max_faults: int = 5
    after_max_ms: int = 30 * 86_400_000
    check_slots: int = 1
    fleet_checks: int | None = None

    @classmethod
    def of(cls, s: Settings) -> WaitLimits:
        return cls(
            interval_ms=s.wait_interval_ms,
            max_ms=s.wait_max_ms,
            max_checks=s.wait_max_checks,
            max_faults=s.wait_max_faults,
            after_max_ms=s.wait_after_max_ms,
            check_slots=s.wait_check_slots,
            fleet_checks=s.wait_fleet_checks,
        )


def check_slots(limits: WaitLimits, concurrency: int) -> int:
    """In-process checks at once: never the host's last job slot, but at least one, or a host
    with one slot could never answer a wait at all."""
    return max(1, min(limits.check_slots, concurrency - 1))


def backoff_ms(interval_ms: int, held_ms: int) -> int:
    """The pause between two checks of a job that has held `held_ms` so far."""
    period = interval_ms * 2 if held_ms >= interval_ms * DOUBLE_AFTER_PERIODS else interval_ms
    return min(period, BACKOFF_CAP_MS)


def jittered(delay_ms: int, random: Random) -> int:
    return delay_ms + int(delay_ms * JITTER * random())


def throttle_delay_ms(limits: WaitLimits, held_ms: int, random: Random) -> int:
    """After a denied check slot: a fraction of the cadence, never under the 11 s floor."""
    base = max(WAIT_THROTTLE_DELAY_MS, backoff_ms(limits.interval_ms, held_ms) // 4)
    return jittered(base, random)


@dataclass(frozen=True, slots=True)
class Held:
    """What a check that did not clear decides: a defer of `delay_ms`, or a refusal."""

    kind: Literal["defer", "unanswerable", "expired-checks", "expired-time"]
    checks: int  # this check included
    faults: int  # in a row, this check included
    delay_ms: int = 0


def after_hold(
    limits: WaitLimits, *, fault: bool, checks: int, faults: int, held_ms: int, random: Random
) -> Held:
    """Decide after a check that held; `checks` and `faults` are the counts before it."""
    faults = faults + 1 if fault else 0
    checks += 1
    if faults >= limits.max_faults:
        return Held("unanswerable", checks, faults)
    if checks >= limits.max_checks:
        return Held("expired-checks", checks, faults)
    if held_ms >= limits.max_ms:
        return Held("expired-time", checks, faults)
    delay = jittered(backoff_ms(limits.interval_ms, held_ms), random)
    delay = max(MIN_HOLD_MS, min(delay, limits.max_ms - held_ms))
    return Held("defer", checks, faults, delay)


def after_is_due(after_ms: int | None, now_ms: int) -> bool:
    """Whether an `after` instant has arrived (or is within the 1 s margin)."""
    return after_ms is None or after_ms <= now_ms + AFTER_MARGIN_MS
