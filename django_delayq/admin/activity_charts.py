"""The geometry of the dashboard's activity charts, for inline SVGs.

Two charts of the last hour, from the workers' per-minute counters
(:mod:`django_delayq.store.activity`): attempts started per minute, as bars
stacked from those that succeeded and those that failed, and lateness to
start (p50 and p99 per minute) as two lines on a logarithmic scale, since
lateness spans milliseconds to minutes. Coordinates are strings, as in
:mod:`.chart`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from django.utils import timezone
from django.utils.translation import gettext as _

from ..store.activity import LATENESS_BUCKETS_MS, Minute
from . import display
from .chart import BOTTOM, GAP, HEIGHT, LEFT, RIGHT, TOP, WIDTH, Tick, _nice_ceiling

PLOT_WIDTH = WIDTH - LEFT - RIGHT
PLOT_HEIGHT = HEIGHT - TOP - BOTTOM
BASELINE = TOP + PLOT_HEIGHT
#: The lateness axis, in ms: from 1 ms to twice the largest bucket.
LATE_FLOOR_MS = 1.0
LATE_CEILING_MS = 2.0 * LATENESS_BUCKETS_MS[-1]


@dataclass(frozen=True)
class StackedBar:
    label: str
    x: str
    width: str
    started: int
    succeeded: int
    failed: int
    ok_y: str
    ok_height: str
    failed_y: str
    failed_height: str


@dataclass(frozen=True)
class Point:
    label: str
    x: str
    y: str
    ms: int
    text: str  # the duration, as the admin writes it


@dataclass(frozen=True)
class Geometry:
    width: int
    height: int
    baseline: str
    left: str
    right: str
    x_ticks: list[Tick]
    y_ticks: list[Tick]


@dataclass(frozen=True)
class ActivityChart:
    frame: Geometry
    bars: list[StackedBar]
    started: int
    succeeded: int
    failed: int


@dataclass(frozen=True)
class LatenessChart:
    frame: Geometry
    p50: list[Point]
    p99: list[Point]

    @property
    def p50_points(self) -> str:
        return " ".join(f"{p.x},{p.y}" for p in self.p50)

    @property
    def p99_points(self) -> str:
        return " ".join(f"{p.x},{p.y}" for p in self.p99)


def activity(minutes: list[Minute]) -> ActivityChart:
    """Bars of attempts started per minute: succeeded below, failed above."""
    scale = _nice_ceiling(max((m.started for m in minutes), default=0))
    slot = PLOT_WIDTH / max(len(minutes), 1)
    bars = []
    for index, minute in enumerate(minutes):
        x = LEFT + index * slot
        ok = PLOT_HEIGHT * minute.succeeded / scale
        failed = PLOT_HEIGHT * minute.failed / scale
        bars.append(
            StackedBar(
                label=_clock(minute),
                x=_num(x + GAP / 2),
                width=_num(max(slot - GAP, 1.0)),
                started=minute.started,
                succeeded=minute.succeeded,
                failed=minute.failed,
                ok_y=_num(BASELINE - ok),
                ok_height=_num(ok),
                failed_y=_num(BASELINE - ok - failed),
                failed_height=_num(failed),
            )
        )
    y_ticks = [
        Tick(_num(BASELINE - PLOT_HEIGHT * value / scale), str(value))
        for value in sorted({0, scale // 2, scale})
    ]
    return ActivityChart(
        frame=_frame(minutes, slot, y_ticks),
        bars=bars,
        started=sum(m.started for m in minutes),
        succeeded=sum(m.succeeded for m in minutes),
        failed=sum(m.failed for m in minutes),
    )


def lateness(minutes: list[Minute]) -> LatenessChart:
    """p50 and p99 of lateness per minute, for the minutes where tasks started."""
    slot = PLOT_WIDTH / max(len(minutes), 1)
    p50: list[Point] = []
    p99: list[Point] = []
    for index, minute in enumerate(minutes):
        x = _num(LEFT + index * slot + slot / 2)
        for quantile, into in ((0.5, p50), (0.99, p99)):
            ms = minute.lateness_quantile(quantile)
            if ms is not None:
                text = display.lateness_text(ms / 1000)
                into.append(Point(_clock(minute), x, _late_y(ms), ms, text))
    # Short labels: the axis has room for five characters or so.
    y_ticks = [
        Tick(_late_y(ms), label)
        for ms, label in (
            (1, _("1 ms")),
            (10, _("10 ms")),
            (100, _("0.1 s")),
            (1_000, _("1 s")),
            (10_000, _("10 s")),
            (100_000, _("100 s")),
        )
    ]
    return LatenessChart(frame=_frame(minutes, slot, y_ticks), p50=p50, p99=p99)


def _late_y(ms: float) -> str:
    span = math.log10(LATE_CEILING_MS) - math.log10(LATE_FLOOR_MS)
    share = (math.log10(max(ms, LATE_FLOOR_MS)) - math.log10(LATE_FLOOR_MS)) / span
    return _num(BASELINE - PLOT_HEIGHT * min(share, 1.0))


def _frame(minutes: list[Minute], slot: float, y_ticks: list[Tick]) -> Geometry:
    x_ticks = [
        Tick(_num(LEFT + index * slot + slot / 2), _clock(minute))
        for index, minute in enumerate(minutes)
        if index % 10 == 0
    ]
    return Geometry(
        width=WIDTH,
        height=HEIGHT,
        baseline=_num(BASELINE),
        left=_num(LEFT),
        right=_num(WIDTH - RIGHT),
        x_ticks=x_ticks,
        y_ticks=y_ticks,
    )


def _clock(minute: Minute) -> str:
    return timezone.localtime(minute.start).strftime("%H:%M")


def _num(value: float) -> str:
    return f"{value:.1f}"
