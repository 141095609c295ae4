"""Percentiles and the summaries every benchmark reports."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1) of a non-empty sample."""
    if not values:
        raise ValueError("percentile of an empty sample")
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def lateness_summary(late_ms: Sequence[float], expected: int) -> dict[str, float]:
    """p50/p90/p99/max of lateness samples, and how many of ``expected`` fired."""
    summary: dict[str, float] = {"n": expected, "fired": len(late_ms)}
    for name, q in (("p50_ms", 0.50), ("p90_ms", 0.90), ("p99_ms", 0.99)):
        summary[name] = percentile(late_ms, q) if late_ms else math.nan
    summary["max_ms"] = max(late_ms) if late_ms else math.nan
    return summary
