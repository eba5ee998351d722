"""The one grammar for memory sizes, CPU counts and durations, with their bounds.

Every place that reads one (the CLI, the env settings, the config files, a job document at
submit and again at pickup, the docker runner) calls these functions, so a value means the same
thing, and is refused for the same reason, wherever it is written.

    memory    <number>[<unit>]  number: digits, optionally a fraction (`1.5g`);
              unit: k, m, g or t (binary, like Docker), optionally followed by `b` or `ib`,
              any case; no unit means bytes. No whitespace, anywhere. A fraction of a byte
              is dropped.
    cpus      a decimal number (`0.5`, `2`); no exponent, no sign, no nan or inf
    duration  <number>[ms|s|m|h|d]; no unit means seconds; no whitespace

Bounds (inclusive): a job's memory 6 MiB (Docker's minimum) to 1 TiB, its CPUs 0.01 (the
engine's smallest NanoCpus step that it accepts) to 512; a host's job budget 6 MiB to 1 PiB and
0.01 to 4096 CPUs; a duration at most 10 years. A value outside them is refused, never clamped:
Docker reads a memory or NanoCpus of 0 as "no limit".
"""

from __future__ import annotations

import math
import re

KIB = 1024
MIB = KIB**2
GIB = KIB**3
TIB = KIB**4

MIN_MEMORY = 6 * MIB
MAX_JOB_MEMORY = TIB
MAX_HOST_MEMORY = 1024 * TIB
MIN_CPUS = 0.01
MAX_JOB_CPUS = 512.0
MAX_HOST_CPUS = 4096.0
MAX_DURATION_MS = 10 * 365 * 86_400_000

# no whitespace anywhere: "4g\n" in a job document is a mistake to report, not to mend
_MEMORY = re.compile(r"(\d{1,20})(?:\.(\d{1,12}))?(?:([kmgt])(?:i?b)?|b)?", re.I | re.A)
_CPUS = re.compile(r"\d{1,6}(?:\.\d{1,9})?", re.A)
_DURATION = re.compile(r"(\d{1,15}(?:\.\d{1,9})?)(ms|s|m|h|d)?", re.A)
_UNIT_BYTES = {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": TIB}
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_SHOWN = 40  # how much of a refused value an error repeats: it stays one short line


def shown(text: str) -> str:
    """A value as an error quotes it: repr (so one line), cut short."""
    return repr(text[:_SHOWN]) + ("..." if len(text) > _SHOWN else "")


def parse_memory(text: str, ceiling: int = MAX_JOB_MEMORY) -> int:
    """Bytes from `512m`, `4g`, `1.5GiB` or a byte count, within [6 MiB, ceiling]."""
    return check_memory(parse_bytes(text), ceiling)


def parse_bytes(text: str) -> int:
    """Bytes from the memory grammar, unbounded: callers bound them."""
    m = _MEMORY.fullmatch(text)
    if not m:
        raise ValueError(f"memory {shown(text)} is not a size like 512m, 4g or a byte count")
    whole, fraction, unit = m.group(1), m.group(2) or "", (m.group(3) or "").lower()
    scale = _UNIT_BYTES[unit]
    value: int = int(whole) * scale + int(fraction or "0") * scale // 10 ** len(fraction)
    return value


def check_memory(value: int, ceiling: int = MAX_JOB_MEMORY) -> int:
    if value < MIN_MEMORY:
        raise ValueError(f"memory of {value} bytes is below the floor of 6m (Docker's minimum)")
    if value > ceiling:
        raise ValueError(
            f"memory of {value} bytes is above the ceiling of {format_memory(ceiling)}"
        )
    return value


def format_memory(value: int) -> str:
    """The shortest exact spelling in k, m or g (a job document written before `t` was known
    to the grammar reads these too): `parse_memory(format_memory(n)) == n`."""
    for unit in ("g", "m", "k"):
        scale = _UNIT_BYTES[unit]
        if value and value % scale == 0:
            return f"{value // scale}{unit}"
    return str(value)


def parse_cpus(text: str, ceiling: float = MAX_JOB_CPUS) -> float:
    m = _CPUS.fullmatch(text)
    if not m:
        raise ValueError(f"cpus {shown(text)} is not a number like 0.5 or 2")
    return check_cpus(float(m.group(0)), ceiling)


def check_cpus(value: object, ceiling: float = MAX_JOB_CPUS) -> float:
    """A CPU count as a float, within [0.01, ceiling]; nan, inf and booleans refused."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"cpus {value!r} is not a number")
    if not (math.isfinite(value) and MIN_CPUS <= value <= ceiling):
        raise ValueError(f"cpus {value!r} is not between {MIN_CPUS} and {ceiling:g}")
    return float(value)


def parse_duration_ms(text: str) -> int:
    """'90s', '10m', '2h', '1d', '250ms'; a bare number is seconds; at most 10 years."""
    m = _DURATION.fullmatch(text)
    if not m:
        raise ValueError(f"{shown(text)} is not a duration (try 30s, 10m, 2h, 1d)")
    value = int(float(m.group(1)) * _UNIT_MS[m.group(2) or "s"])
    if value > MAX_DURATION_MS:
        raise ValueError(f"{shown(text)} is longer than the ceiling of 10 years")
    return value


def parse_seconds(text: str) -> float:
    return parse_duration_ms(text) / 1000


def limited(host_config: dict[str, object]) -> bool:
    """Whether an Engine API HostConfig carries both a memory and a CPU limit within the
    bounds: the docker runner creates no container without them."""
    memory, nano = host_config.get("Memory"), host_config.get("NanoCpus")
    if not isinstance(memory, int) or not isinstance(nano, int):
        return False
    return MIN_MEMORY <= memory <= MAX_JOB_MEMORY and MIN_CPUS <= nano / 1e9 <= MAX_JOB_CPUS
