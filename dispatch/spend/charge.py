"""What one run is charged, decided once its ending is known.

A run that never started (the runner says so, or the container exited 125-127: the engine or
the shell could not start the command) is refunded in full. Any other run is settled: the
dollars it reported (or, with no report or a malformed one, its reserved cap; an overshoot is
charged in full), one run in each run window, and its reported tokens in each token ledger.
The settle goes out in the background (`Reservation.close`): it never holds up the job's end.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from dispatch.model import RunRecord
from dispatch.spend.ledger import Reservation
from dispatch.spend.plan import MICRO
from dispatch.spend.usage_report import Usage

NEVER_STARTED_EXITS = frozenset({125, 126, 127})


@dataclass(frozen=True, slots=True)
class Charge:
    reserved: bool = False  # charged to spend caps (False: none matched, or refunded)
    cost_usd: float | None = None
    tokens: int | None = None

    def on(self, record: RunRecord) -> RunRecord:
        """The run record with what was charged."""
        if not self.reserved and self.cost_usd is None and self.tokens is None:
            return record
        return msgspec.structs.replace(
            record, budget_reserved=self.reserved, cost_usd=self.cost_usd, tokens=self.tokens
        )


NOTHING = Charge()  # refunded, or never reserved and nothing reported


def never_started(started: bool, exit_code: int | None) -> bool:
    return not started or exit_code in NEVER_STARTED_EXITS


def charge(
    reservation: Reservation | None, usage: Usage, started: bool, exit_code: int | None
) -> Charge:
    """Settle or refund `reservation` (if any) and say what the run record carries."""
    if never_started(started, exit_code):
        if reservation is not None:
            reservation.close("refund")
        return NOTHING
    usd = usage.usd_micro
    if reservation is not None:
        reservation.close("settle", -1 if usd is None else usd, usage.tokens or 0)
        if usd is None and reservation.usd_micro:
            usd = reservation.usd_micro
    if reservation is None and usd is None and usage.tokens is None:
        return NOTHING
    cost = None if usd is None else usd / MICRO
    return Charge(reservation is not None, cost, usage.tokens)
