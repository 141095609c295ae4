"""Lateness statistics over the samples that the recorder collected.

Everything here is pure: samples in, numbers out, so it is unit-tested
without any server.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Sample:
    """One task's execution: its index in the scenario, when it was due and
    when it started, both ``time.time()`` seconds on this machine."""

    index: int
    due: float
    started: float

    @property
    def lateness_ms(self) -> float:
        return (self.started - self.due) * 1000.0


def nearest_rank(values: Sequence[float], percentile: float) -> float | None:
    """Return the nearest-rank percentile of ``values`` (None when empty).

    The nearest rank is the smallest value such that at least ``percentile``
    percent of the values are less than or equal to it: always one of the
    values, never an interpolation between two.
    """
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
    if not values:
        return None
    ordered = sorted(values)
    # The 1e-9 keeps float noise (99 / 100 * 100 = 99.00000000000001) from
    # pushing the rank one place too far.
    rank = math.ceil(percentile / 100.0 * len(ordered) - 1e-9)
    return ordered[max(rank, 1) - 1]


def dedupe(samples: Iterable[Sample]) -> tuple[list[Sample], int]:
    """Keep each task's first execution; also return how many repeats there were.

    A peer that redelivers a task runs it twice; lateness counts the first
    start, and the repeats are reported apart.
    """
    first: dict[int, Sample] = {}
    repeats = 0
    for sample in samples:
        seen = first.get(sample.index)
        if seen is None:
            first[sample.index] = sample
            continue
        repeats += 1
        if sample.started < seen.started:
            first[sample.index] = sample
    return list(first.values()), repeats


def summarise(n: int, samples: Sequence[Sample]) -> dict[str, Any]:
    """The scenario's result: how many of ``n`` fired, and lateness in ms."""
    late = [s.lateness_ms for s in samples]
    result: dict[str, Any] = {"n": n, "fired": len(samples)}
    for p in PERCENTILES:
        value = nearest_rank(late, p)
        result[f"p{p}_ms"] = None if value is None else round(value, 2)
    result["max_ms"] = round(max(late), 2) if late else None
    return result


def empty_summary(n: int) -> dict[str, Any]:
    """The result of a scenario that could not run."""
    result: dict[str, Any] = {"n": n, "fired": None}
    for p in PERCENTILES:
        result[f"p{p}_ms"] = None
    result["max_ms"] = None
    return result


def completed_per_s(samples: Sequence[Sample], first_due: float) -> float | None:
    """Tasks started per second from the first due time to the last start.

    None when nothing fired, or when everything started at (or before) the
    first due time, where the rate has no meaning.
    """
    if not samples:
        return None
    span = max(s.started for s in samples) - first_due
    if span <= 0:
        return None
    return round(len(samples) / span, 1)


def parse_sample(raw: bytes | str) -> Sample:
    """Decode one recorder entry, ``"<index> <due> <started>"``."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    index, due, started = text.split()
    return Sample(int(index), float(due), float(started))


def empty_result(
    name: str,
    light: tuple[float, float],
    steady: tuple[float, float],
    burst_n: int,
    errors: list[str],
) -> dict[str, Any]:
    """A peer's result before (or instead of) any measurement."""
    return {
        "peer": name,
        "version": None,
        "config": None,
        "schedule_per_s": None,
        "bulk_schedule_per_s": None,
        "light": empty_summary(max(1, round(light[0] * light[1]))),
        "steady": empty_summary(max(1, round(steady[0] * steady[1]))),
        "burst": {**empty_summary(burst_n), "completed_per_s": None},
        "idle_cmds_per_s": None,
        "redis_bytes_per_task": None,
        "db_bytes_per_task": None,
        "store": None,
        "errors": errors,
    }
