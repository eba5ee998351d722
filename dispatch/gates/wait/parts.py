"""What one pickup knows of its wait (`Look`), what a check said (`Checked`), and the wait
gate's collaborators (`WaitParts`)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import msgspec

from dispatch.gates.base import Pickup
from dispatch.gates.wait.claims import IdentityClaims
from dispatch.gates.wait.conditions import Conditions
from dispatch.gates.wait.policy import Random
from dispatch.gates.wait.profiles import ANSWERS, Answer, Checker
from dispatch.gates.wait.state import WaitState, WaitStates


@dataclass(frozen=True)
class WaitParts:
    states: WaitStates
    claims: IdentityClaims
    runner: Checker
    random: Random = random.random


@dataclass
class Look:
    """One pickup's look at its wait."""

    pickup: Pickup
    conds: Conditions
    identity: str | None
    now: int
    stored: WaitState | None
    state: WaitState
    claimed: bool = False

    @property
    def held_ms(self) -> int:
        """How long the job has held on its checks: from its first hold, or from its `after`
        instant if that came later (a wait for an instant does not eat the max wait)."""
        return self.now - self.checks_since if self.state.since_ms else 0

    @property
    def checks_since(self) -> int:
        return max(self.state.since_ms or self.now, self.state.after_ms)

    def noted(
        self, max_ms: int, answer: Answer, name: str, *, checks: int, faults: int
    ) -> WaitState:
        """The state after a check that was answered."""
        return msgspec.structs.replace(
            self.state,
            since_ms=self.state.since_ms or self.now,
            checks=checks,
            faults=faults,
            throttles=0,
            answer=ANSWERS[answer.verdict],
            line=answer.line,
            profile=name,
            gives_up_ms=self.checks_since + max_ms,
        )


@dataclass
class Checked:
    answer: Answer
    profile: str
