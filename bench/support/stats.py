"""The figures' arithmetic: one percentile rule for every bench, and Jain's fairness index."""

from __future__ import annotations


def percentile(values: list[float], q: float) -> float:
    """The value at rank int(q * n) of the sorted values (the last one at most); NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def jain(shares: list[int]) -> float:
    """Jain's fairness over the shares: 1.0 when all are equal, 1/n when one took everything."""
    total = sum(shares)
    squares = sum(s * s for s in shares)
    return total * total / (len(shares) * squares) if squares else 0.0
