"""The geometry of a bar chart, for an inline SVG drawn by a template.

Coordinates are returned as strings: a template would localize floats
("12,5" in some languages), which SVG does not read.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.utils import timezone

WIDTH = 760
HEIGHT = 230
LEFT, RIGHT, TOP, BOTTOM = 44.0, 10.0, 12.0, 28.0
#: Gap between two bars, in SVG units.
GAP = 2.0


@dataclass(frozen=True)
class Bar:
    x: str
    y: str
    width: str
    height: str
    count: int
    label: str


@dataclass(frozen=True)
class Tick:
    position: str
    label: str


@dataclass(frozen=True)
class BarChart:
    width: int
    height: int
    bars: list[Bar]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    baseline: str  # y of the x axis
    left: str  # x of the y axis
    right: str  # x where the plot ends
    total: int
    peak: int


def per_minute(
    counts: list[int], start: datetime.datetime, *, label_every: int = 10
) -> BarChart:
    """Bars for ``counts[i]`` tasks due in minute ``start + i``."""
    plot_width = WIDTH - LEFT - RIGHT
    plot_height = HEIGHT - TOP - BOTTOM
    baseline = TOP + plot_height
    scale = _nice_ceiling(max(counts, default=0))
    slot = plot_width / max(len(counts), 1)
    bars, x_ticks = [], []
    for index, count in enumerate(counts):
        minute = _local(start + datetime.timedelta(minutes=index))
        x = LEFT + index * slot
        height = plot_height * count / scale
        bars.append(
            Bar(
                x=_num(x + GAP / 2),
                y=_num(baseline - height),
                width=_num(max(slot - GAP, 1.0)),
                height=_num(height),
                count=count,
                label=minute.strftime("%H:%M"),
            )
        )
        if index % label_every == 0:
            x_ticks.append(Tick(_num(x + slot / 2), minute.strftime("%H:%M")))
    y_ticks = [
        Tick(_num(baseline - plot_height * value / scale), str(value))
        for value in sorted({0, scale // 2, scale})
    ]
    return BarChart(
        width=WIDTH,
        height=HEIGHT,
        bars=bars,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        baseline=_num(baseline),
        left=_num(LEFT),
        right=_num(WIDTH - RIGHT),
        total=sum(counts),
        peak=max(counts, default=0),
    )


def _nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 4, 5, 10, 20, 40, 50, ... that is >= value
    (even, above 1, so that the middle tick is a whole number)."""
    if value <= 1:
        return 1 if value <= 0 else 2
    magnitude = 1
    while magnitude * 10 <= value:
        magnitude *= 10
    for step in (1, 2, 4, 5, 10):
        if step * magnitude >= value and (step * magnitude) % 2 == 0:
            return step * magnitude
    return 10 * magnitude


def _local(moment: datetime.datetime) -> datetime.datetime:
    return timezone.localtime(moment) if timezone.is_aware(moment) else moment


def _num(value: float) -> str:
    return f"{value:.1f}"
