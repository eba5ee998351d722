"""What one run is charged, decided once its ending is known.

A run the runner says never started is refunded in full. Any run that started is settled,
whatever its exit: 125-127 is what a shell says of a missing or unrunnable command, and a job
whose last command is missing has spent by then (the docker runner reports a container the
engine could not start as not started, so no exit code stands in for that). Settled means: the
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


def charge(reservation: Reservation | None, usage: Usage, started: bool) -> Charge:
    """Settle or refund `reservation` (if any) and say what the run record carries."""
    if not started:
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
