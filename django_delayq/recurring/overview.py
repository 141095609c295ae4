"""The state of each periodic schedule, and which are behind: what
``delayq_status``, the metrics and the admin show.

A schedule is **behind** when it is neither paused nor removed and either

* nothing keeps it: its ``planned_through`` is more than
  :data:`BEHIND_AFTER` in the past (a keeper moves it a few seconds ahead
  of now every few seconds, so no dispatcher and no looping sweeper has
  planned it for a while), or the code declares it (or an enabled runtime
  schedule defines it) and no process ever planned it; or
* a tick of it is late: a tick row still ``scheduled`` more than
  :data:`BEHIND_AFTER` past its ``run_at`` (no dispatcher moves it, or
  the workers of its queue do not keep up).

One read of the schedules' rows and one grouped query over the late ticks
(on the ``(status, run_at)`` index: none, when all is well), whatever the
number of schedules; a health probe's reads are bounded (``limit``).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from django.db.models import Count, Min, Q

from ..exceptions import InvalidTaskDefinition
from ..models import DelayedTask, PeriodicSchedule, RuntimeSchedule, read_db
from .ticks import KEY_PREFIX, TICK_SEPARATOR, schedule_of_key_sql

#: How late a schedule may be (its planning, or a tick's start) before it
#: is behind: a few of the keeper's one-second rounds.
BEHIND_AFTER = datetime.timedelta(seconds=10)

State = Literal["active", "paused", "removed"]
STATES: tuple[State, ...] = ("active", "paused", "removed")


@dataclass(frozen=True)
class ScheduleState:
    """One schedule, as its row and its late ticks say."""

    name: str
    state: State
    #: None: declared in the code, never planned by any process.
    planned_through: datetime.datetime | None
    #: Tick rows still scheduled more than BEHIND_AFTER past their run_at.
    late_ticks: int = 0
    oldest_late_tick: datetime.datetime | None = None

    def unplanned(self, now: datetime.datetime) -> bool:
        """Nothing keeps it: never planned, or not for a while."""
        return self.state == "active" and (
            self.planned_through is None or self.planned_through < now - BEHIND_AFTER
        )

    def behind(self, now: datetime.datetime) -> bool:
        return self.state == "active" and (self.unplanned(now) or self.late_ticks > 0)


def schedule_states(
    now: datetime.datetime,
    *,
    declared_names: Iterable[str] = (),
    using: str | None = None,
    limit: int | None = None,
) -> list[ScheduleState]:
    """Every schedule with a row, and those in ``declared_names`` without
    one (declared, never planned), by name.

    With ``limit`` (a health probe): only the active schedules that may be
    behind, read with bounded queries (at most ``limit`` rows each), the
    latest first; ``declared_names`` is not read.
    """
    db = read_db() if using is None else using
    late = late_ticks(now, db, limit)
    rows = PeriodicSchedule.objects.using(db).order_by("name")
    if limit is not None:
        rows = rows.filter(paused=False, removed_at=None).filter(
            Q(planned_through__lt=now - BEHIND_AFTER) | Q(name__in=list(late))
        )[:limit]
        declared_names = ()
    states = [state_of(row, late) for row in rows]
    known = {state.name for state in states}
    states += [
        ScheduleState(name=name, state="active", planned_through=None)
        for name in sorted(set(declared_names) - known)
    ]
    return sorted(states, key=lambda state: state.name)


def state_of(
    row: PeriodicSchedule,
    late: dict[str, tuple[int, datetime.datetime | None]],
) -> ScheduleState:
    """One schedule's state from its row and :func:`late_ticks`."""
    count, oldest = late.get(row.name, (0, None))
    return ScheduleState(
        name=row.name,
        state="removed"
        if row.removed_at is not None
        else "paused"
        if row.paused
        else "active",
        planned_through=row.planned_through,
        late_ticks=count,
        oldest_late_tick=oldest,
    )


def declared_names(using: str | None = None) -> list[str]:
    """The names of the schedules that should be planned: those this
    process's code declares (none when ``DELAYQ["PERIODIC"]`` is not even a
    dict: the system checks say so), and the enabled runtime schedules."""
    from .declared import declared

    try:
        names = [schedule.name for schedule in declared()[0]]
    except InvalidTaskDefinition:
        names = []
    db = read_db() if using is None else using
    enabled = RuntimeSchedule.objects.using(db).filter(enabled=True)
    return [*names, *enabled.values_list("name", flat=True)]


def late_ticks(
    now: datetime.datetime, using: str | None = None, limit: int | None = None
) -> dict[str, tuple[int, datetime.datetime | None]]:
    """Schedule name -> (late ticks, the earliest one's run_at); with
    ``limit``, of the ``limit`` latest ticks only. Read from ``using``, by
    default where the reports read (:func:`~django_delayq.models.read_db`)."""
    db = read_db() if using is None else using
    # The schedule's name read in SQL by both paths, so that they count the
    # same rows.
    ticks = (
        DelayedTask.objects.using(db)
        .overdue(by=now, grace=BEHIND_AFTER)
        .filter(key__startswith=KEY_PREFIX, key__contains=TICK_SEPARATOR)
        .annotate(schedule=schedule_of_key_sql("key"))
    )
    if limit is not None:
        # Bounded, on the (status, run_at) index; counted here.
        found: dict[str, tuple[int, datetime.datetime | None]] = {}
        oldest_first = ticks.order_by("run_at").values_list("schedule", "run_at")
        for name, run_at in oldest_first[:limit]:
            count, oldest = found.get(name, (0, run_at))
            found[name] = (count + 1, oldest)
        return found
    rows = (
        ticks.order_by()
        .values_list("schedule")
        .annotate(n=Count("pk"), oldest=Min("run_at"))
    )
    return {name: (count, oldest) for name, count, oldest in rows}
