"""This host's job budget: the memory and CPUs its running jobs hold, and each project's
`hostShare` of it.

The budget is DISPATCH_HOST_MEMORY / DISPATCH_HOST_CPUS (`configured`); when only one is set the
other is the machine's figure. With neither set, `HostBudget`'s totals are the machine's, which
the size gate still uses to refuse a job no container here could ever get (the host-budget gate,
`dispatch/gates/host_budget.py`, then admits without a hold).

Reservations live in this process and are taken synchronously, so a check-and-take is atomic in
one event loop. CPUs are counted in nano-CPUs (Docker's unit): sums are exact integers, so
releasing everything brings `used()` back to exactly zero.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from dispatch.config.settings import Settings

Exceeded = Literal["host", "share"]  # what a size overruns: the budget or a share
_NANO = 1_000_000_000
_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class JobSize:
    memory: int  # bytes
    cpus: float


@dataclass(frozen=True, slots=True, eq=False)
class Reservation:
    """One running job's share of the budget. Compared by identity, like a slot's ticket."""

    job_id: str
    project_id: str | None
    memory: int  # bytes
    nano_cpus: int


def machine_size() -> JobSize:
    """This machine's physical memory and CPU count."""
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return JobSize(memory=memory, cpus=float(os.cpu_count() or 1))


def describe(size: JobSize) -> str:
    """'4.0 GiB and 2 CPUs', for sentences an operator reads."""
    unit = "CPU" if size.cpus == 1 else "CPUs"
    return f"{size.memory / _GIB:.1f} GiB and {size.cpus:g} {unit}"


def _nano(cpus: float) -> int:
    return round(cpus * _NANO)


def _size(memory: int, nano_cpus: int) -> JobSize:
    return JobSize(memory=memory, cpus=nano_cpus / _NANO)


class HostBudget:
    """This host's job budget and the reservations of the jobs running against it."""

    def __init__(self, settings: Settings, machine: JobSize | None = None) -> None:
        machine = machine or machine_size()
        self.configured = settings.host_memory is not None or settings.host_cpus is not None
        self.memory = settings.host_memory if settings.host_memory is not None else machine.memory
        self.cpus = settings.host_cpus if settings.host_cpus is not None else machine.cpus
        self._held: dict[Reservation, None] = {}  # insertion-ordered set
        # their sum, kept as they come and go: asked twice a pickup, and a host of many slots
        # would add them all up each time (exact integers: no drift)
        self._memory = self._nano_cpus = 0

    @property
    def total(self) -> JobSize:
        return JobSize(memory=self.memory, cpus=self.cpus)

    def share_of(self, share: float) -> JobSize:
        """`share` of the budget. Rounded, not floored: 0.3 of 10 CPUs must hold 3 CPUs."""
        return _size(round(share * self.memory), round(share * _nano(self.cpus)))

    def misfit(self, size: JobSize, share: float | None) -> Exceeded | None:
        """What `size` exceeds even with nothing running: the budget, or the share of it."""
        if not _fits(size, self.total):
            return "host"
        if share is not None and not _fits(size, self.share_of(share)):
            return "share"
        return None

    def bound(self, size: JobSize, project_id: str | None, share: float | None) -> Exceeded | None:
        """What stops `size` from starting now, or None when it fits."""
        if not _fits(_plus(self.used(), size), self.total):
            return "host"
        if project_id is None or share is None:
            return None
        within = _fits(_plus(self.project_used(project_id), size), self.share_of(share))
        return None if within else "share"

    def try_reserve(
        self, job_id: str, size: JobSize, project_id: str | None, share: float | None
    ) -> Reservation | None:
        if self.bound(size, project_id, share) is not None:
            return None
        reservation = Reservation(job_id, project_id, size.memory, _nano(size.cpus))
        self._held[reservation] = None
        self._memory += reservation.memory
        self._nano_cpus += reservation.nano_cpus
        return reservation

    def release(self, reservation: Reservation) -> bool:
        """Give a reservation back; False if it was already given back or is not ours."""
        if reservation not in self._held:
            return False
        del self._held[reservation]
        self._memory -= reservation.memory
        self._nano_cpus -= reservation.nano_cpus
        return True

    def used(self) -> JobSize:
        return _size(self._memory, self._nano_cpus)

    def project_used(self, project_id: str) -> JobSize:
        return _sum(r for r in self._held if r.project_id == project_id)

    def running(self) -> list[str]:
        return [r.job_id for r in self._held]


def _sum(held: Iterable[Reservation]) -> JobSize:
    memory = nano_cpus = 0
    for r in held:
        memory += r.memory
        nano_cpus += r.nano_cpus
    return _size(memory, nano_cpus)


def _plus(a: JobSize, b: JobSize) -> JobSize:
    return _size(a.memory + b.memory, _nano(a.cpus) + _nano(b.cpus))


def _fits(size: JobSize, limit: JobSize) -> bool:
    return size.memory <= limit.memory and _nano(size.cpus) <= _nano(limit.cpus)
