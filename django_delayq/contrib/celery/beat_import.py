"""django-celery-beat's schedules, read for ``delayq_import_beat``.

:func:`read_beat_schedules` reads each ``django_celery_beat`` periodic task
(its crontab, interval, solar or clocked schedule, enabled flag, arguments,
queue and expiry) into a :class:`BeatSchedule`: what django-delayq can keep
of it, and what it cannot, in words. It reads through django-celery-beat's
own models, so it needs that app installed; it writes nothing.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any

from ...exceptions import InvalidTaskDefinition
from .beat import crontab

#: Celery's own housekeeping task, which beat schedules by itself: the
#: sweeper does that work here.
CELERY_INTERNAL_TASKS = frozenset({"celery.backend_cleanup"})

_PERIODS = {
    "days": datetime.timedelta(days=1),
    "hours": datetime.timedelta(hours=1),
    "minutes": datetime.timedelta(minutes=1),
    "seconds": datetime.timedelta(seconds=1),
    "microseconds": datetime.timedelta(microseconds=1),
}


@dataclass
class BeatSchedule:
    """One django-celery-beat periodic task, as django-delayq can keep it."""

    name: str
    task: str
    enabled: bool
    cron: str | None = None
    every: datetime.timedelta | None = None
    timezone: str | None = None
    #: a clocked schedule: one run at this time
    once_at: datetime.datetime | None = None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    #: no tick after this
    expires_at: datetime.datetime | None = None
    #: ticks missed while nothing ran are skipped (``expire_seconds``)
    skip_missed: bool = False
    #: when beat last sent it (its ticks up to then ran under Celery)
    last_run_at: datetime.datetime | None = None
    #: how many times beat sent it
    runs: int = 0
    #: why it cannot be imported at all; empty if it can
    refused: str = ""
    #: what of it is not kept, in words
    dropped: list[str] = field(default_factory=list)

    @property
    def importable(self) -> bool:
        return not self.refused


def read_beat_schedules() -> list[BeatSchedule]:
    """Every django-celery-beat periodic task, by name."""
    from django_celery_beat.models import PeriodicTask

    rows = PeriodicTask.objects.select_related(
        "crontab", "interval", "solar", "clocked"
    ).order_by("name")
    return [read_one(row) for row in rows]


def read_one(row: Any) -> BeatSchedule:
    """One ``django_celery_beat.models.PeriodicTask`` row."""
    read = BeatSchedule(
        name=row.name,
        task=row.task,
        enabled=bool(row.enabled),
        last_run_at=row.last_run_at,
        runs=int(row.total_run_count or 0),
    )
    if row.task in CELERY_INTERNAL_TASKS:
        read.refused = (
            f"{row.task} is Celery's own housekeeping; django-delayq's sweeper "
            f"does that work"
        )
        return read
    _read_when(row, read)
    try:
        read.args = _json(row.args or "[]", list, "args")
        read.kwargs = _json(row.kwargs or "{}", dict, "kwargs")
    except ValueError as exc:
        read.refused = str(exc)
        return read
    read.queue = row.queue or None
    if row.priority is not None:
        read.priority = int(row.priority)
        read.dropped.append(
            f"priority {row.priority} is kept as is, on django-delayq's scale "
            f"(-100 to 100, higher first)"
        )
    read.expires_at = row.expires
    if row.expire_seconds:
        read.skip_missed = True
    if row.one_off and read.once_at is None:
        read.refused = read.refused or (
            "one_off on a repeating schedule is not supported; schedule the "
            "task once with schedule(..., eta=...)"
        )
    if row.start_time is not None:
        read.dropped.append(
            f"start_time {row.start_time.isoformat()} (a schedule starts "
            f"with its next tick after the import)"
        )
    for unused in ("exchange", "routing_key"):
        if getattr(row, unused, None):
            read.dropped.append(f"{unused} {getattr(row, unused)!r} (use queue)")
    if (getattr(row, "headers", "") or "{}").strip() not in ("", "{}"):
        read.dropped.append("headers (pass what the task needs as arguments)")
    return read


def _read_when(row: Any, read: BeatSchedule) -> None:
    if row.crontab is not None:
        schedule = row.crontab
        try:
            read.cron = crontab(
                minute=schedule.minute,
                hour=schedule.hour,
                day_of_week=schedule.day_of_week,
                day_of_month=schedule.day_of_month,
                month_of_year=schedule.month_of_year,
            ).cron
        except InvalidTaskDefinition as exc:
            read.refused = str(exc)
        read.timezone = str(schedule.timezone) if schedule.timezone else None
    elif row.interval is not None:
        unit = _PERIODS.get(row.interval.period)
        if unit is None:
            read.refused = f"interval period {row.interval.period!r} is unknown"
            return
        read.every = unit * row.interval.every
        if read.every < datetime.timedelta(seconds=1):
            read.refused = (
                f"every {row.interval.every} {row.interval.period} is shorter "
                f"than a second, the shortest every= here"
            )
    elif row.clocked is not None:
        read.once_at = row.clocked.clocked_time
    elif row.solar is not None:
        read.refused = (
            f"solar schedule ({row.solar.event}) has no equivalent; use a "
            f"crontab at the time it means for you"
        )
    else:
        read.refused = "it has no schedule"


def _json(text: str, kind: type, what: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"its {what} are not JSON: {text[:80]!r}") from None
    if not isinstance(value, kind):
        raise ValueError(
            f"its {what} must be a JSON {kind.__name__}; got {text[:80]!r}"
        )
    return value
