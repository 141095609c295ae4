"""Every state change of a task row and of a periodic schedule's row, in
one place.

A row's ``status`` only ever changes through the functions below, each one
conditional UPDATE fenced on what the row must still be for the change to
be right (see docs/guide/execution.md, "The life of a task"):

=========================  ============================  ======================
change                     fence                         by
=========================  ============================  ======================
:func:`claim_due`          scheduled, due by ``now``     worker (batch)
:func:`claim`              as above, or running and      worker (one row)
                           claimed by the same entry
:func:`succeed_many`       running, this attempt, this   worker (batch)
                           claiming entry
:func:`succeed`            the same                      worker (one row)
:func:`retry_later`        the same                      worker
:func:`fail`               the same, or the caller's     worker, sweeper
                           expected status
:func:`recover`            running, this attempt         sweeper
:func:`hand_back`          running, this attempt, this   worker, supervisor
                           claiming entry
:func:`expire`             running, this attempt, this   worker
                           claiming entry
:func:`cancel`             scheduled                     replace=True
:func:`cancel_active`      scheduled, or running (any    cancel()
                           attempt)
:func:`move`               scheduled, expiring after     reschedule()
                           the new ``run_at``
:func:`restart`            failed, expiring after the    retry()
                           new ``run_at``
=========================  ============================  ======================

The attempt number alone is not a sufficient fence for an outcome:
``retry()`` starts a failed task over from attempt 0, so a worker paused
during attempt 3 could otherwise wake up and record its outcome over the new
run's attempt 3. The stream entry that claimed the attempt tells them apart.

A claim made for a batch (several tasks at once, run in groups) marks its
``claim_entry`` (:data:`BATCH_MARK`). If that worker dies, nothing says
which of the batch's tasks it was running, so a takeover of such a claim
runs the task again *alone* without counting a new attempt: the batch's
tasks are not charged for a neighbour that killed its process. A takeover
of a claim made alone counts an attempt as always, so a task that kills
every worker running it still ends failed after its attempts.

A periodic schedule's row (:class:`~.models.PeriodicSchedule`) is
*active* (its ticks are written ahead, up to ``planned_through``),
*paused* (``paused``: none are written, those that fall in the pause are
skipped) or *removed* (``removed_at``: the code no longer declares it). Its
changes are fenced the same way, on what the planner read:

===========================  ============================  ======================
change                       fence                         by
===========================  ============================  ======================
:func:`create_schedules`     no row of that name yet       planner
:func:`advance_schedule`     active, ``planned_through``   planner (one schedule)
                             and definition as read
:func:`advance_schedules`    active, ``planned_through``   planner (many)
                             as read
:func:`redefine_schedule`    definition,                   planner
                             ``planned_through`` and
                             ``removed_at`` as read
:func:`retire_schedule`      not removed                   planner
:func:`pause_schedule`       not paused                    pause()
:func:`resume_schedule`      paused                        resume()
===========================  ============================  ======================

Functions that take a task row update the instance to match what they
wrote. The schedule functions leave theirs alone: the planner updates its
copies once the transaction has committed, so that a rollback (a tick's key
taken, say) leaves them as stored. An error is kept to
:data:`~.text.MAX_ERROR_CHARS` and a traceback to
:data:`~.text.MAX_TRACEBACK_CHARS`, cut in the middle with a marker: a row
and the admin page showing it stay small whatever a task raised. Nothing
here touches Redis; callers index or unindex after commit.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Case, CharField, F, Q, QuerySet, TextField, Value, When
from django.db.models.functions import Cast, Concat
from django.utils import timezone

from .db import statements
from .models import DelayedTask, PeriodicSchedule, Status
from .text import MAX_ERROR_CHARS, MAX_TRACEBACK_CHARS, clipped

#: Appended to the entry id in ``claim_entry`` by a claim made for a batch.
BATCH_MARK = "~b"


def delivery_of(claim_entry: str) -> str:
    """The stream entry id a ``claim_entry`` value names."""
    return claim_entry.removesuffix(BATCH_MARK)


def claimed_in_batch(row: DelayedTask) -> bool:
    return row.claim_entry.endswith(BATCH_MARK)


def claim_due(
    claims: Sequence[tuple[Any, str]],
    now: datetime.datetime,
    worker: str,
    using: str,
) -> list[DelayedTask]:
    """Claim every scheduled, due task among ``claims`` in one statement.

    ``claims`` pairs task ids with the stream entries delivering them. Each
    claimed row moves ``scheduled -> running`` with ``attempts + 1``,
    ``started_at = now``, its entry as ``claim_entry`` and ``worker`` added
    to ``worker_ids``, and is returned;
    anything else (not due by ``now``, running, finished, missing) is left
    for :func:`claim` to decide one by one. Returns nothing where the
    database cannot return rows from an UPDATE: then every task takes the
    one-row path.
    """
    if not claims or not statements.can_return_rows(using):
        return []
    if len(claims) > 1:
        claims = [(task_id, entry + BATCH_MARK) for task_id, entry in claims]
    return statements.claim_due(claims, now, worker, using)


def claim(
    row: DelayedTask,
    entry_id: str,
    now: datetime.datetime,
    worker: str,
    using: str,
) -> int | None:
    """Claim the task of ``row`` (as just read) for the delivery ``entry_id``,
    by ``worker``.

    A scheduled row must be due by ``now``; a running row may only be taken
    over by the entry that claimed its current attempt (its worker died, or
    a database error cut the attempt short), and a takeover of a batch's
    claim counts no new attempt (see above). Returns the attempt number, or
    None if the row changed meanwhile (another worker, a cancel or a
    reschedule won).
    """
    rows = DelayedTask.objects.using(using).filter(pk=row.pk, attempts=row.attempts)
    attempt = row.attempts + 1
    if row.status == Status.SCHEDULED:
        rows = rows.due(by=now)
    else:
        rows = rows.filter(status=Status.RUNNING, claim_entry=row.claim_entry)
        if delivery_of(row.claim_entry) != entry_id:
            return None
        if claimed_in_batch(row):
            attempt = row.attempts
    # Written whole: the fence above makes the list read with the row the
    # one still stored.
    workers = [*row.worker_ids, worker]
    if not rows.update(
        status=Status.RUNNING,
        attempts=attempt,
        started_at=now,
        claim_entry=entry_id,
        worker_ids=workers,
    ):
        return None
    row.status, row.attempts, row.started_at = Status.RUNNING, attempt, now
    row.claim_entry, row.worker_ids = entry_id, workers
    return attempt


@dataclass
class Success:
    """A finished attempt to record: the row, when it started, what it returned."""

    row: DelayedTask
    started_at: datetime.datetime
    result: Any


def succeed_many(
    successes: Sequence[Success], now: datetime.datetime, using: str
) -> bool:
    """Record every success in one statement; False if any attempt was fenced.

    Fenced means another worker took one of these attempts over (this one
    was paused past the visibility timeout): the caller must roll back the
    whole transaction, since it cannot tell which function's writes belong
    to the fenced attempt. On True the rows are updated to match.
    """
    if not successes:
        return True
    updated = statements.succeed_many(
        [
            (s.row.pk, s.row.attempts, s.row.claim_entry, s.started_at, s.result)
            for s in successes
        ],
        now,
        using,
    )
    if updated != len(successes):
        return False
    for success in successes:
        row = success.row
        row.status, row.started_at, row.finished_at = (
            Status.SUCCEEDED,
            success.started_at,
            now,
        )
        row.result, row.last_error, row.last_traceback = success.result, "", ""
    return True


def succeed(
    row: DelayedTask,
    result: Any,
    started_at: datetime.datetime,
    now: datetime.datetime,
    using: str,
) -> bool:
    """Record the success of ``row``'s current attempt; False if fenced."""
    values = {
        "status": Status.SUCCEEDED,
        "started_at": started_at,
        "finished_at": now,
        "result": result,
        "last_error": "",
        "last_traceback": "",
    }
    if not statements.update_attempt(
        row.pk, row.attempts, row.claim_entry, values, using
    ):
        return False
    row.status, row.started_at, row.finished_at = Status.SUCCEEDED, started_at, now
    row.result, row.last_error, row.last_traceback = result, "", ""
    return True


def retry_later(
    row: DelayedTask,
    attempt: int,
    run_at: datetime.datetime,
    error: str,
    trace: str,
    using: str,
    *,
    max_attempts: int | None = None,
) -> bool:
    """``running -> scheduled`` at ``run_at`` after a failed attempt, with
    ``max_attempts`` as the row's new attempt budget if given (a task that
    retries beyond it, see :class:`~django_delayq.options.NextAttempt`).

    False if the attempt was fenced (nothing written). The caller indexes
    the row again after commit.
    """
    error, trace = _clipped_failure(error, trace)
    budget = {} if max_attempts is None else {"max_attempts": max_attempts}
    updated = (
        DelayedTask.objects.using(using)
        .filter(**_fence(row, attempt), status=Status.RUNNING)
        .update(
            status=Status.SCHEDULED,
            run_at=run_at,
            started_at=row.started_at,
            last_error=error,
            last_traceback=trace,
            **budget,
        )
    )
    if updated:
        row.status, row.run_at = Status.SCHEDULED, run_at
        row.last_error, row.last_traceback = error, trace
        if max_attempts is not None:
            row.max_attempts = max_attempts
    return bool(updated)


def fail(
    row: DelayedTask,
    attempt: int,
    error: str,
    trace: str,
    *,
    expect: str,
    using: str,
) -> bool:
    """Mark the task failed, fenced on ``expect`` status and the attempt."""
    error, trace = _clipped_failure(error, trace)
    now = timezone.now()
    updated = (
        DelayedTask.objects.using(using)
        .filter(**_fence(row, attempt), status=expect)
        .update(
            status=Status.FAILED,
            started_at=row.started_at,
            finished_at=now,
            last_error=error,
            last_traceback=trace,
        )
    )
    if updated:
        row.status, row.finished_at = Status.FAILED, now
        row.last_error, row.last_traceback = error, trace
    return bool(updated)


def recover(row: DelayedTask, now: datetime.datetime, error: str, using: str) -> bool:
    """``running -> scheduled`` now, for an attempt whose worker is gone.

    Fenced on the attempt: a worker that took the task over meanwhile wins.
    """
    error = clipped(error, MAX_ERROR_CHARS)
    updated = (
        DelayedTask.objects.using(using)
        .filter(pk=row.pk, status=Status.RUNNING, attempts=row.attempts)
        .update(status=Status.SCHEDULED, run_at=now, last_error=error)
    )
    if updated:
        row.status, row.run_at, row.last_error = Status.SCHEDULED, now, error
    return bool(updated)


def hand_back(rows: Sequence[DelayedTask], using: str) -> list[DelayedTask]:
    """``running -> scheduled``, the attempt not counted, for claimed tasks
    that never ran to an outcome through no fault of their own.

    For the neighbours of a task that hung or killed its process: they were
    claimed with it (or ran in its group, whose transaction was lost), and
    go back to their due-set at their own ``run_at`` as if never claimed.
    Fenced on each one's attempt and claiming entry; returns the rows handed
    back, updated to match.
    """
    handed = []
    for row in rows:
        updated = (
            DelayedTask.objects.using(using)
            .filter(**_fence(row, row.attempts), status=Status.RUNNING)
            .update(status=Status.SCHEDULED, attempts=row.attempts - 1)
        )
        if updated:
            row.status, row.attempts = Status.SCHEDULED, row.attempts - 1
            handed.append(row)
    return handed


def expire(row: DelayedTask, now: datetime.datetime, error: str, using: str) -> bool:
    """``running -> cancelled`` for a claimed task whose ``expires_at`` has
    passed, its function not called; False if the attempt was fenced.

    Its claim counts an attempt, as a refused row's does; ``started_at`` is
    cleared, since nothing started, and ``error`` says why it ends here.
    """
    error = clipped(error, MAX_ERROR_CHARS)
    updated = (
        DelayedTask.objects.using(using)
        .filter(**_fence(row, row.attempts), status=Status.RUNNING)
        .update(
            status=Status.CANCELLED,
            started_at=None,
            finished_at=now,
            last_error=error,
            last_traceback="",
        )
    )
    if updated:
        row.status, row.started_at, row.finished_at = Status.CANCELLED, None, now
        row.last_error, row.last_traceback = error, ""
    return bool(updated)


def cancel(rows: QuerySet[DelayedTask], now: datetime.datetime) -> int:
    """``scheduled -> cancelled`` for the matching rows; how many changed.

    For ``schedule(..., replace=True)``, which leaves a running holder of
    the key alone: only scheduled rows match (``cancel()`` uses
    :func:`cancel_active`).
    """
    return rows.filter(status=Status.SCHEDULED).update(
        status=Status.CANCELLED, finished_at=now
    )


def cancel_active(rows: QuerySet[DelayedTask], now: datetime.datetime) -> int:
    """``scheduled -> cancelled`` and ``running -> cancelled`` for the
    matching rows, in one statement; how many changed.

    A running row also gets ``last_error`` ``"cancelled while running
    (attempt N)"``. Fenced on the status: a worker recording the attempt's
    outcome at the same moment updates the same row fenced on ``running``
    too, so the database's row lock lets exactly one of the two change it.
    Once this one has, every outcome of the attempt (:func:`succeed`,
    :func:`succeed_many`, :func:`retry_later`, :func:`fail`, a rescue's
    :func:`hand_back`) matches nothing. The worker learns of the cancel from
    the row (see :mod:`django_delayq.worker.time_limits`).
    """
    running = Q(status=Status.RUNNING)
    error = Concat(
        Value("cancelled while running (attempt "),
        Cast("attempts", CharField()),
        Value(")"),
        output_field=CharField(),
    )
    # ``status`` is assigned last: MySQL and MariaDB evaluate the SET
    # clauses left to right, each seeing the columns assigned before it, so
    # the two CASEs must read the status as it was.
    return rows.filter(status__in=(Status.SCHEDULED, Status.RUNNING)).update(
        last_error=Case(
            When(running, then=error),
            default=F("last_error"),
            output_field=TextField(),
        ),
        last_traceback=Case(
            When(running, then=Value("")),
            default=F("last_traceback"),
            output_field=TextField(),
        ),
        finished_at=now,
        status=Status.CANCELLED,
    )


def move(
    rows: QuerySet[DelayedTask],
    run_at: datetime.datetime,
    now: datetime.datetime,
    meta: dict[str, Any] | None = None,
) -> int:
    """A new ``run_at`` for the matching scheduled rows, and new metadata if
    ``meta`` is given (``{}`` clears it); how many changed.

    A row that would be due (at ``run_at``, or ``now`` if later) at or after
    its ``expires_at`` is left alone: it could never run.
    """
    changes: dict[str, Any] = {"run_at": run_at}
    if meta is not None:
        changes["meta"] = meta or None
    return (
        rows.filter(status=Status.SCHEDULED)
        .filter(_runs_before_expiry(run_at, now))
        .update(**changes)
    )


def restart(
    rows: QuerySet[DelayedTask], run_at: datetime.datetime, now: datetime.datetime
) -> int:
    """``failed -> scheduled`` at ``run_at`` with a fresh set of attempts.

    A row that would be due at or after its ``expires_at`` is left alone,
    as by :func:`move`. Raises ``IntegrityError`` when the row's dedupe key
    is held by another active task now (run it in a savepoint).
    """
    return (
        rows.filter(status=Status.FAILED)
        .filter(_runs_before_expiry(run_at, now))
        .update(
            status=Status.SCHEDULED,
            run_at=run_at,
            attempts=0,
            finished_at=None,
            worker_ids=[],
        )
    )


def _runs_before_expiry(run_at: datetime.datetime, now: datetime.datetime) -> Q:
    """The rows that, due at ``run_at`` (or ``now`` if later), have not
    expired by then."""
    return Q(expires_at__isnull=True) | Q(expires_at__gt=max(run_at, now))


# -- periodic schedules --------------------------------------------------------


def create_schedules(
    rows: Sequence[PeriodicSchedule], using: str
) -> list[PeriodicSchedule]:
    """Insert the rows of schedules seen for the first time; return them as
    stored.

    A row another process inserted meanwhile is kept, not replaced: both
    planned the same schedule through about the same moment.
    """
    if not rows:
        return []
    schedules = PeriodicSchedule.objects.using(using)
    schedules.bulk_create(rows, ignore_conflicts=True)
    return list(schedules.filter(name__in=[row.name for row in rows]))


def advance_schedule(
    row: PeriodicSchedule, horizon: datetime.datetime, using: str
) -> bool:
    """``planned_through`` from what ``row`` read to ``horizon``, for an
    active schedule.

    Fenced on ``planned_through`` and the definition as read: False if
    another planner moved it first, or the schedule was paused, redefined
    or removed meanwhile (nothing written).
    """
    return (
        PeriodicSchedule.objects.using(using)
        .filter(
            name=row.name,
            planned_through=row.planned_through,
            definition=row.definition,
            paused=False,
            removed_at=None,
        )
        .update(planned_through=horizon)
        == 1
    )


def advance_schedules(
    rows: Sequence[PeriodicSchedule], horizon: datetime.datetime, using: str
) -> set[str]:
    """:func:`advance_schedule` for many active rows: the names this call
    moved to ``horizon``.

    Rows planned together in an earlier round share their
    ``planned_through``: one UPDATE per such group, fenced on it. When an
    UPDATE matches fewer rows than asked, another planner moved some of
    them: the rows now at ``horizon`` are this caller's (another planner's
    horizon is another instant).
    """
    groups: dict[datetime.datetime, list[str]] = defaultdict(list)
    for row in rows:
        groups[row.planned_through].append(row.name)
    schedules = PeriodicSchedule.objects.using(using)
    moved = 0
    for start, names in groups.items():
        moved += schedules.filter(
            name__in=names, planned_through=start, paused=False, removed_at=None
        ).update(planned_through=horizon)
    names = [row.name for row in rows]
    if moved == len(names):
        return set(names)
    return set(
        schedules.filter(name__in=names, planned_through=horizon).values_list(
            "name", flat=True
        )
    )


def redefine_schedule(
    row: PeriodicSchedule,
    definition: str,
    now: datetime.datetime,
    using: str,
) -> bool:
    """Active or removed -> active under ``definition``, planned through
    ``now``: the code declares the schedule differently, or again.

    Fenced on the definition, ``planned_through`` and ``removed_at`` as
    ``row`` read them: False if another process did it first.
    """
    return bool(
        PeriodicSchedule.objects.using(using)
        .filter(
            name=row.name,
            definition=row.definition,
            planned_through=row.planned_through,
            removed_at=row.removed_at,
        )
        .update(definition=definition, planned_through=now, removed_at=None)
    )


def retire_schedule(name: str, now: datetime.datetime, using: str) -> bool:
    """Active or paused -> removed at ``now``: the code no longer declares it.

    Fenced on not being removed: False if another process retired it first.
    """
    return bool(
        PeriodicSchedule.objects.using(using)
        .filter(name=name, removed_at=None)
        .update(removed_at=now)
    )


def pause_schedule(name: str, now: datetime.datetime, using: str) -> bool:
    """Not paused -> paused at ``now``; False if it was paused already (or
    there is no such row)."""
    return bool(
        PeriodicSchedule.objects.using(using)
        .filter(name=name, paused=False)
        .update(paused=True, paused_at=now)
    )


def resume_schedule(name: str, now: datetime.datetime, using: str) -> bool:
    """Paused -> not paused, planned through ``now``: the ticks that fell in
    the pause are skipped. False if it was not paused (or there is no such
    row)."""
    return bool(
        PeriodicSchedule.objects.using(using)
        .filter(name=name, paused=True)
        .update(paused=False, paused_at=None, planned_through=now)
    )


def _clipped_failure(error: str, trace: str) -> tuple[str, str]:
    """An attempt's error and traceback at the sizes a row keeps."""
    return clipped(error, MAX_ERROR_CHARS), clipped(trace, MAX_TRACEBACK_CHARS)


def _fence(row: DelayedTask, attempt: int) -> dict[str, Any]:
    """The row's state an outcome may overwrite: this attempt, this delivery."""
    return {"pk": row.pk, "attempts": attempt, "claim_entry": row.claim_entry}
