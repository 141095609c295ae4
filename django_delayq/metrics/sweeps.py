"""A sweeper that counts its passes, for the commands serving metrics.

The sweeper itself knows nothing of metrics: the commands build this
subclass when ``--metrics-port`` is given.
"""

from __future__ import annotations

import datetime
from dataclasses import fields

from ..sweeper import Sweeper, SweepResult
from . import note_sweep


class CountingSweeper(Sweeper):
    """A :class:`~django_delayq.sweeper.Sweeper` whose every pass is counted
    in ``delayq_sweeps_total`` and ``delayq_sweep_repairs_total``."""

    def sweep(self, *, now: datetime.datetime | None = None) -> SweepResult:
        result = super().sweep(now=now)
        note_sweep(repairs_of(result), skipped=result.skipped)
        return result


def repairs_of(result: SweepResult) -> dict[str, int]:
    """Every count of a pass, by field name."""
    return {
        field.name: getattr(result, field.name)
        for field in fields(result)
        if field.type in (int, "int")
    }
