"""CPU seconds from /proc: of given processes (their own, not their children's) and of the
whole machine (busy and stolen), so a bench can say what a run cost and what the host took."""

from __future__ import annotations

import os
from collections.abc import Iterable


def process_cpu_s(pids: Iterable[int]) -> float:
    """User + system CPU seconds the processes have used so far."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def machine_cpu_s() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _, _, irq, softirq, steal = ticks[:8]
    hz = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / hz, steal / hz
