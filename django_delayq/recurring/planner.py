"""Keep every schedule's next ticks written as task rows: those the code
declares and those defined in the admin (:mod:`.runtime`).

The dispatchers run :func:`plan` about once a second and the sweepers once
a pass; any number of them at once. Each tick becomes an ordinary
``DelayedTask`` row (due at the tick, dedupe key ``periodic:<name>@<time>``)
a few seconds ahead of its time, so the due-sets start it on time and every
guarantee of a task row (outbox, sweeper, retries, cancel, the admin)
applies to it.

Exactly once: a schedule's ``PeriodicSchedule.planned_through`` says up to
when its ticks are written. A planner advances it with a compare-and-set
UPDATE in the transaction that inserts the ticks in between; of two
planners that computed the same ticks, one updates the row and commits, the
other's UPDATE matches nothing and it writes nothing. Tick times depend only
on the schedule's definition, so the two agree on what to write. That
UPDATE, and every other change of a schedule's row, is in
:mod:`django_delayq.transitions`, beside those of the task rows.

Missed ticks: when ``planned_through`` is already in the past, nothing kept
the schedule for a while (every process was down). Its ticks since then,
and the ticks written before that have not started, were missed; the
schedule's ``catch_up`` says which of them run.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from .. import registry, transitions
from ..exceptions import DuplicateTask, TaskNotRegistered
from ..models import (
    ACTIVE_STATUSES,
    DelayedTask,
    DelayedTaskQuerySet,
    PeriodicSchedule,
    write_db,
)
from .declared import declared
from .runtime import found
from .ticks import MAX_CATCH_UP, Schedule, tick_prefix

logger = logging.getLogger(__name__)

#: How far ahead ticks are written: well beyond a planner's cadence (a
#: second in a dispatcher), so a tick is in Redis before it is due.
LOOKAHEAD = datetime.timedelta(seconds=5)
#: A schedule is planned again once less than this is left ahead of it,
#: so an idle schedule's row is written every few seconds, not every round.
REFILL_BELOW = LOOKAHEAD / 2
#: The most ticks one schedule writes in one round (an every=1 s schedule
#: writes about LOOKAHEAD's worth).
MAX_TICKS_PER_ROUND = 1000
#: A tick is *missed* once it is this far past and no process kept its
#: schedule: a planner that is only slow (a long round, a database that
#: paused) writes its ticks late, it does not skip them.
MISSED_AFTER = LOOKAHEAD
#: Schedules refilled in one transaction: one compare-and-set per group of
#: schedules planned together before, one read of held keys, one insert and
#: one Redis round trip for all of them.
CHUNK = 500


@dataclass
class PlanResult:
    """What one planning round did."""

    planned: int = 0
    caught_up: int = 0
    skipped: int = 0
    replaced: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


_reported_problems: set[str] = set()


def plan(now: datetime.datetime | None = None) -> PlanResult:
    """Write the ticks due within :data:`LOOKAHEAD` of every schedule that
    needs them (declared in the code, or enabled in the admin); retire
    schedules neither declares any more."""
    result = PlanResult()
    schedules, result.problems = declared()
    now = _aware(timezone.now() if now is None else now)
    rows = {row.name: row for row in _schedule_rows().all()}
    # The runtime schedules are read after the rows: a row that an edit's
    # restart (by another planner) changed was committed after the edit,
    # so the definitions read next are the edited ones, and this planner
    # does not restart the schedule back to what it was.
    runtime = found(taken={schedule.name for schedule in schedules})
    schedules = sorted([*schedules, *runtime.schedules], key=lambda s: s.name)
    result.problems += runtime.problems
    for problem in result.problems:
        if problem not in _reported_problems:  # once per process, not per round
            _reported_problems.add(problem)
            logger.error("periodic schedule left out: %s", problem)
    _create_missing(schedules, rows, now)
    names = {schedule.name for schedule in schedules}
    for name, row in rows.items():
        if row.removed_at is None and name not in names:
            _retire(row, now, result, disabled=name in runtime.disabled)
    refill: list[tuple[Schedule, PeriodicSchedule]] = []
    for schedule in schedules:
        row = rows[schedule.name]
        if row.paused:
            continue
        changed = row.removed_at is not None or row.definition != schedule.definition
        if changed and not _restart(schedule, row, now, result):
            continue  # another process restarted it, and plans it
        planned_through = _aware(row.planned_through)
        if planned_through >= now + REFILL_BELOW:
            continue
        if planned_through >= now - MISSED_AFTER:
            refill.append((schedule, row))  # the usual case: batched below
            continue
        with _duplicate_logged(schedule.name):
            _plan_one(schedule, row, now, result)
    for start in range(0, len(refill), CHUNK):
        chunk = refill[start : start + CHUNK]
        with _duplicate_logged(", ".join(s.name for s, _ in chunk[:3])):
            _refill(chunk, now, result)
    return result


@contextlib.contextmanager
def _duplicate_logged(names: str) -> Iterator[None]:
    try:
        yield
    except DuplicateTask:
        # A tick's key is held by a row written after the held keys were
        # read (scheduled by hand under a tick's key): the next round plans
        # around it.
        logger.warning(
            "periodic schedule %s: a tick's key is taken; planning again in "
            "the next round",
            names,
        )


def _refill(
    chunk: list[tuple[Schedule, PeriodicSchedule]],
    now: datetime.datetime,
    result: PlanResult,
) -> None:
    """Write the next ticks of schedules kept until now, in one transaction."""
    horizon = now + LOOKAHEAD
    db = write_db()
    with transaction.atomic(using=db):
        won = transitions.advance_schedules([row for _, row in chunk], _db(horizon), db)
        plans = [
            (
                schedule,
                schedule.ticks_after(
                    _aware(row.planned_through), horizon, MAX_TICKS_PER_ROUND
                ),
            )
            for schedule, row in chunk
            if schedule.name in won
        ]
        _write(plans)
    result.planned += sum(len(ticks) for _, ticks in plans)
    for _, row in chunk:
        if row.name in won:
            row.planned_through = _db(horizon)


def _create_missing(
    schedules: Iterable[Schedule],
    rows: dict[str, PeriodicSchedule],
    now: datetime.datetime,
) -> None:
    """Rows for schedules seen for the first time, planned through now: a
    new schedule starts with its next tick, it has missed nothing."""
    new = [
        PeriodicSchedule(name=s.name, definition=s.definition, planned_through=_db(now))
        for s in schedules
        if s.name not in rows
    ]
    for row in transitions.create_schedules(new, write_db()):
        rows[row.name] = row


def _plan_one(
    schedule: Schedule,
    row: PeriodicSchedule,
    now: datetime.datetime,
    result: PlanResult,
) -> None:
    start = _aware(row.planned_through)
    horizon = now + LOOKAHEAD
    missed_by = now - MISSED_AFTER
    db = write_db()
    with transaction.atomic(using=db):
        if not transitions.advance_schedule(row, _db(horizon), db):
            return  # another planner wrote them, or it was paused or changed
        ticks = _catch_up(schedule, start, missed_by, result)
        # Ticks less than MISSED_AFTER past are written, to run at once.
        ahead = schedule.ticks_after(missed_by, horizon, MAX_TICKS_PER_ROUND)
        _write([(schedule, ticks + ahead)])
        result.planned += len(ahead)
    row.planned_through = _db(horizon)


def _catch_up(
    schedule: Schedule,
    start: datetime.datetime,
    now: datetime.datetime,
    result: PlanResult,
) -> list[datetime.datetime]:
    """Nothing planned the schedule from ``start`` until ``now`` (here: the
    moment ticks count as missed): decide which missed ticks run, by
    ``catch_up``. Returns those to write; cancels the written ones that
    must not run."""
    unplanned = [t for t in schedule.ticks_until(now, MAX_CATCH_UP) if t > start]
    overdue = list(_ticks_of(schedule.name).due(by=_db(now)).order_by("run_at"))
    missed = len(unplanned) + len(overdue)
    keep_written: list[DelayedTask]
    write: list[datetime.datetime]
    if schedule.catch_up == "none":
        keep_written, write = [], []
    elif schedule.catch_up == "latest":
        if unplanned:
            keep_written, write = [], unplanned[-1:]
        else:
            keep_written, write = overdue[-1:], []
    else:
        write = unplanned
        keep_written = overdue[-max(0, MAX_CATCH_UP - len(unplanned)) :]
        if len(unplanned) >= MAX_CATCH_UP:
            keep_written = []
    dropped = [task for task in overdue if task not in keep_written]
    _cancel(dropped)
    caught_up = len(write) + len(keep_written)
    result.caught_up += caught_up
    result.skipped += missed - caught_up
    if missed:
        logger.warning(
            "periodic schedule %s: %d tick(s) missed while nothing kept it "
            "(since %s); catch_up=%r runs %d of them",
            schedule.name,
            missed,
            start.isoformat(),
            schedule.catch_up,
            caught_up,
        )
    return write


def _write(plans: list[tuple[Schedule, list[datetime.datetime]]]) -> None:
    """Write each schedule's ticks as task rows: one read of the keys held
    already, one insert, one Redis round trip after the commit."""
    plans = [(schedule, ticks) for schedule, ticks in plans if ticks]
    if not plans:
        return
    from ..api import schedule_many

    # A tick whose key a row already holds was written before (by a
    # previous release, or before the schedule was paused and resumed): it
    # stays, and is not written twice. Read inside the compare-and-set's
    # transaction, so no other planner writes one meanwhile.
    # (The status is tested here, not in SQL, as in api: SQLite's planner
    # would otherwise read the status index instead of the key index.)
    wanted = [
        (schedule, tick, schedule.key(tick))
        for schedule, ticks in plans
        for tick in ticks
    ]
    held = {
        key
        for key, status in _task_rows()
        .filter(key__in=[key for _, _, key in wanted])
        .values_list("key", "status")
        if status in ACTIVE_STATUSES
    }
    calls = [schedule.call(tick) for schedule, tick, key in wanted if key not in held]
    if calls:
        schedule_many(calls)


def _restart(
    schedule: Schedule,
    row: PeriodicSchedule,
    now: datetime.datetime,
    result: PlanResult,
) -> bool:
    """The code declares the schedule differently (or again, after it was
    removed): its ticks not yet due were planned for the old definition.
    Cancel them and plan the new definition from now (``row`` is updated,
    for the caller to plan it in this round); ticks already due are left to
    run. False if another process did it first."""
    db = write_db()
    with transaction.atomic(using=db):
        if not transitions.redefine_schedule(row, schedule.definition, _db(now), db):
            return False
        cancelled = _cancel(_future_ticks(schedule.name, now))
    was, was_removed = row.definition, row.removed_at is not None
    row.definition, row.planned_through = schedule.definition, _db(now)
    row.removed_at = None
    logger.warning(
        "periodic schedule %s is now %s (was %s%s); %d tick(s) of the old "
        "definition not yet due were cancelled",
        schedule.name,
        schedule.definition,
        was,
        ", removed" if was_removed else "",
        cancelled,
    )
    result.replaced.append(schedule.name)
    return True


def _retire(
    row: PeriodicSchedule,
    now: datetime.datetime,
    result: PlanResult,
    disabled: bool = False,
) -> None:
    """The code no longer declares the schedule, or its runtime definition
    was disabled or deleted: stop its future ticks."""
    db = write_db()
    with transaction.atomic(using=db):
        if not transitions.retire_schedule(row.name, _db(now), db):
            return
        cancelled = _cancel(_future_ticks(row.name, now))
        stranded = _cancel(_unrunnable(_ticks_of(row.name).due(by=_db(now))))
    logger.warning(
        "periodic schedule %s is %s: its %d future tick(s) were cancelled and "
        "it writes no more (ticks already due still run%s)",
        row.name,
        "disabled" if disabled else "no longer declared in the code or the admin",
        cancelled,
        f"; {stranded} of them were cancelled too, as no task of this "
        f"deployment runs them"
        if stranded
        else "",
    )
    result.removed.append(row.name)


def is_removed(name: str) -> bool:
    """Whether schedule ``name`` was declared once and is no longer."""
    return _schedule_rows().filter(name=name, removed_at__isnull=False).exists()


def _unrunnable(ticks: Iterable[DelayedTask]) -> list[DelayedTask]:
    """The ticks whose task this deployment does not know: those of a
    ``DELAYQ["PERIODIC"]`` entry that was removed with its schedule (its
    function ran under the schedule's name, with the entry's arguments), or
    of a ``@periodic`` function gone from the code. A worker could only
    fail them, "not registered", attempt after attempt."""
    known: dict[str, bool] = {}
    stranded = []
    for tick in ticks:
        if tick.name not in known:
            try:
                registry.get(tick.name)
            except TaskNotRegistered:
                known[tick.name] = False
            else:
                known[tick.name] = True
        if not known[tick.name]:
            stranded.append(tick)
    return stranded


def _ticks_of(name: str) -> DelayedTaskQuerySet:
    """The rows of schedule ``name``'s ticks, whatever their status."""
    return _task_rows().filter(key__startswith=tick_prefix(name))


def _future_ticks(name: str, now: datetime.datetime) -> list[DelayedTask]:
    return list(_ticks_of(name).scheduled().filter(run_at__gt=_db(now)))


def _cancel(tasks: Iterable[DelayedTask]) -> int:
    from ..changes import cancel

    return sum(cancel(task.pk) for task in tasks)


def _aware(value: datetime.datetime) -> datetime.datetime:
    """Datetimes compared in UTC (naive ones are local, as with USE_TZ=False)."""
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    return value.astimezone(datetime.UTC)


def pause(name: str) -> int:
    """Pause a schedule: it writes no ticks until :func:`resume`, and its
    ticks not yet due are cancelled. Kept in its row, so a pause survives
    restarts and deploys. Returns how many ticks were cancelled; 0 (and
    nothing changed) if it was paused already.

    :raises PeriodicSchedule.DoesNotExist: no schedule of that name was
        ever planned.
    """
    now = timezone.now()
    db = write_db()
    with transaction.atomic(using=db):
        if not transitions.pause_schedule(name, now, db):
            _schedule_rows().get(name=name)  # DoesNotExist, or paused already
            return 0
        # After the UPDATE, which waits for a planner advancing the row:
        # the ticks it wrote are committed and found here; a planner that
        # comes later finds the row paused and writes none.
        cancelled = _cancel(_future_ticks(name, now))
    logger.warning(
        "periodic schedule %s paused; %d tick(s) not yet due cancelled", name, cancelled
    )
    return cancelled


def resume(name: str) -> bool:
    """Resume a paused schedule from its next tick: the ticks that fell in
    the pause are skipped, whatever its ``catch_up``. Returns whether it was
    paused.

    :raises PeriodicSchedule.DoesNotExist: as :func:`pause`.
    """
    now = timezone.now()
    db = write_db()
    with transaction.atomic(using=db):
        if not transitions.resume_schedule(name, now, db):
            _schedule_rows().get(name=name)  # DoesNotExist, or not paused
            return False
    logger.warning("periodic schedule %s resumed", name)
    return True


def _schedule_rows() -> QuerySet[PeriodicSchedule]:
    """The schedules' rows, on the task rows' database (:func:`write_db`):
    the compare-and-set of ``planned_through`` commits with the ticks it
    writes, and a read replica, where the router sends reads, may lag."""
    return PeriodicSchedule.objects.using(write_db())


def _task_rows() -> DelayedTaskQuerySet:
    return DelayedTask.objects.using(write_db())


def _db(value: datetime.datetime) -> datetime.datetime:
    """A moment as the database takes it: aware with USE_TZ, naive local
    time without (as Django stores it then)."""
    if settings.USE_TZ:
        return timezone.make_aware(value) if timezone.is_naive(value) else value
    return timezone.make_naive(value) if timezone.is_aware(value) else value
