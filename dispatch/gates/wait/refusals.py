"""The wait gate's refusals, each with its sentence: what an operator reads in `dispatch why`
and `dispatch runs` when a wait ends without running the job."""

from __future__ import annotations

from dispatch.config.schemas import WaitProfile
from dispatch.gates.base import Refuse
from dispatch.gates.wait.conditions import TARGET
from dispatch.gates.wait.policy import Held
from dispatch.gates.wait.profiles import Answer
from dispatch.reasons import (
    WAIT_EXPIRED,
    WAIT_PROFILE_UNKNOWN,
    WAIT_SUPERSEDED,
    WAIT_UNANSWERABLE,
    WAIT_UNREADABLE,
)

STARVED = (
    "gave up waiting: the checks could not get a check slot often enough within"
    " DISPATCH_WAIT_MAX; not run"
)


def profile_problem(
    names: tuple[str, ...], profiles: dict[str, WaitProfile], has_target: bool
) -> Refuse | None:
    """An undeclared profile, or one asked about a target the job does not have."""
    for name in names:
        profile = profiles.get(name)
        if profile is None:
            return Refuse(
                WAIT_PROFILE_UNKNOWN,
                f"waiting on `{name}` is not something this host can answer: wait-profiles.json"
                " declares no such profile; not run",
            )
        if not has_target and any(TARGET in arg for arg in profile.command):
            return Refuse(
                WAIT_UNREADABLE,
                f"the profile `{name}` is asked about the job's target, and this job has none"
                " (neither a repo nor a folder); not run",
            )
    return None


def superseded(dedup: str | None, other: str | None, what: str) -> Refuse:
    return Refuse(
        WAIT_SUPERSEDED,
        f"another job with the dedup key {dedup!r} ({other or 'unknown'}) {what} on the same"
        " conditions; not run",
    )


def gave_up(held: Held, name: str, answer: Answer, held_ms: int) -> Refuse:
    said = f" (last: {answer.line})" if answer.line else ""
    if held.kind == "unanswerable":
        return Refuse(
            WAIT_UNANSWERABLE,
            f"the check `{name}` could not tell {held.faults} times in a row{said}; not run",
        )
    if held.kind == "expired-checks":
        return Refuse(
            WAIT_EXPIRED, f"gave up waiting on `{name}` after {held.checks} checks{said}; not run"
        )
    return Refuse(WAIT_EXPIRED, f"gave up waiting on `{name}` after {span(held_ms)}{said}; not run")


def span(ms: int) -> str:
    """A duration for a sentence: 30d, 24h00m, 15m, 40s."""
    if ms and ms % 86_400_000 == 0:
        return f"{ms // 86_400_000}d"
    hours, minutes = divmod(ms // 60_000, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m" if minutes else f"{ms // 1000}s"
