"""``cancel()``, ``reschedule()`` and ``retry()``: changes to a task that
exists.

Each writes first, fenced on the row's status (for ``reschedule()`` and
``retry()`` a worker that claimed the row first wins; ``cancel()`` takes a
running row too, and loses only to its outcome), in the caller's
transaction, and touches Redis only after the commit, as ``schedule()``
does. Refusals are raised after the
``atomic()`` block, so the caller's transaction stays usable.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, transaction
from django.utils import timezone

from . import signals, transitions
from .db.deadlocks import retrying_deadlocks
from .exceptions import (
    DuplicateTask,
    InvalidArgument,
    InvalidSchedule,
    InvalidTaskState,
    TaskNotFound,
)
from .lookups import Lookup, current, matching, parse_lookup, write_alias, written
from .models import ACTIVE_STATUSES, DelayedTask, OutboxEntry, Status
from .outbox import index_after_commit, unindex_after_commit
from .payload import check_meta
from .timing import resolve_run_at


def cancel(
    task_or_id: DelayedTask | uuid.UUID | str | None = None,
    *,
    key: str | None = None,
    using: str | None = None,
) -> bool:
    """Cancel a scheduled or running task, by task, id or dedupe key.

    A running task's row becomes ``cancelled`` at once (``last_error``
    ``"cancelled while running (attempt N)"``), and its worker stops the
    run: the task's function sees :func:`~django_delayq.raise_if_cancelled`
    raise (or ``current_run().cancelled`` true) within about a second, and
    is stopped by force after ``DELAYQ["CANCEL_GRACE"]`` seconds. Whatever
    the run does afterwards is not recorded, and an atomic task's writes
    are rolled back (see docs/guide/cancel-reschedule.md).

    :returns: ``True`` if this call cancelled it; ``False`` if there is no
        such task or it has finished (succeeded, failed or already
        cancelled). A task finishing at the same moment ends either
        succeeded or cancelled, and this says which.
    """
    lookup = parse_lookup(task_or_id, key)
    db = write_alias(using)
    now = timezone.now()

    def write() -> DelayedTask | None:
        # savepoint=False: no extra SAVEPOINT round trips inside the caller's
        # transaction. Nothing below raises on purpose (a raise through this
        # block would mark the caller's transaction for rollback).
        with transaction.atomic(using=db, savepoint=False):
            # Write first, fenced on status (a worker that claimed or
            # finished the row first wins), then read what was written.
            # Reading first and then writing would fail at once on SQLite
            # ("database is locked") whenever another process wrote in
            # between; the UPDATE instead waits for the lock like any write.
            if not transitions.cancel_active(matching(lookup, db), now):
                return None
            row = written(lookup, db, status=Status.CANCELLED, finished_at=now)
            unindex_after_commit([row], OutboxEntry.Action.CANCEL, db)
            signals.send_on_commit(signals.task_cancelled, [row], db)
            return row

    # On MySQL and MariaDB the UPDATE can be a deadlock's victim when the
    # worker records the task's outcome at the same moment: tried again
    # when this call owns its transaction (see db.deadlocks).
    row = retrying_deadlocks(db, write)
    if row is None:
        return False
    if isinstance(task_or_id, DelayedTask):
        task_or_id.status = Status.CANCELLED
        task_or_id.finished_at = now
        task_or_id.last_error = row.last_error
    return True


def cancel_ids(
    task_ids: Sequence[uuid.UUID], *, using: str | None = None
) -> set[uuid.UUID]:
    """Cancel the scheduled and running tasks among ``task_ids`` at once, as
    :func:`cancel` cancels one: one fenced ``UPDATE``, one read back, one
    Redis round trip after the commit, for the whole batch (the bulk
    actions of ``delayq_tasks`` and the admin, on thousands of tasks).

    :returns: the ids it cancelled; the others were finished, or gone.
    """
    db = write_alias(using)
    now = timezone.now()
    ids = list(task_ids)

    def write() -> list[DelayedTask]:
        with transaction.atomic(using=db, savepoint=False):
            # In primary key order, as a worker's group commit locks its rows:
            # two batches never wait on each other in a cycle.
            rows = DelayedTask.objects.using(db).filter(pk__in=ids).order_by("pk")
            if not transitions.cancel_active(rows, now):
                return []
            # This call's writes: cancelled at this very moment.
            done = list(
                DelayedTask.objects.using(db).filter(
                    pk__in=ids, status=Status.CANCELLED, finished_at=now
                )
            )
            unindex_after_commit(done, OutboxEntry.Action.CANCEL, db)
            signals.send_on_commit(signals.task_cancelled, done, db)
            return done

    return {row.pk for row in retrying_deadlocks(db, write)}


def reschedule(
    task_or_id: DelayedTask | uuid.UUID | str | None = None,
    *,
    key: str | None = None,
    delay: float | datetime.timedelta | None = None,
    eta: datetime.datetime | None = None,
    meta: Mapping[str, Any] | None = None,
    using: str | None = None,
) -> DelayedTask:
    """Move a scheduled task to a new time (``delay``, ``eta``, or now).

    The task keeps its metadata unless ``meta`` is given, which replaces it
    as given (checked as :func:`~django_delayq.schedule` checks it; the
    task's ``@task(meta=...)`` and the middleware's ``on_schedule()`` are
    not applied again); ``meta={}`` removes it.

    The task keeps its ``expires_at``: a new time at or after it is refused.

    :raises TaskNotFound: no task has this id, or no scheduled or running
        task holds this key.
    :raises InvalidTaskState: the task is running, finished or cancelled.
    :raises InvalidSchedule: a bad ``delay`` or ``eta``, or one at or after
        the task's expiry (nothing is written).
    :returns: the updated row.
    """
    now = timezone.now()
    run_at = resolve_run_at(delay, eta, now=now)
    new_meta = None if meta is None else check_meta(meta)
    lookup = parse_lookup(task_or_id, key)
    db = write_alias(using)
    raise_state = ""
    refusal: InvalidSchedule | None = None
    with transaction.atomic(using=db, savepoint=False):
        # Write first (see cancel()), then read what was written.
        if transitions.move(matching(lookup, db), run_at, now, new_meta):
            row: DelayedTask | None = written(
                lookup, db, status=Status.SCHEDULED, run_at=run_at
            )
            assert row is not None
            index_after_commit([row], OutboxEntry.Action.RESCHEDULE, db)
        else:
            row = current(lookup, db)
            if row is not None and row.status == Status.SCHEDULED:
                refusal = _past_expiry(row, run_at, now, "reschedule")
                # Else it was running a moment ago and a retry made it
                # scheduled again in between: report that rather than guess.
                raise_state = f"Task {row.pk} changed state meanwhile; try again."
                row = None
    # Raised only after the block, so the caller's transaction stays usable.
    if refusal is not None:
        raise refusal
    if row is None and raise_state:
        raise InvalidTaskState(raise_state)
    if row is None:
        raise TaskNotFound(
            f"No scheduled task with {lookup}; finished and "
            f"cancelled tasks cannot be rescheduled, schedule() a new one."
        )
    if row.status != Status.SCHEDULED:
        raise InvalidTaskState(
            f"Task {row.pk} is {row.status}; only scheduled tasks can be rescheduled."
        )
    if isinstance(task_or_id, DelayedTask):
        task_or_id.run_at = run_at
        if new_meta is not None:
            task_or_id.meta = new_meta or None
    return row


def retry(
    task_or_id: DelayedTask | uuid.UUID | str,
    *,
    delay: float | datetime.timedelta | None = None,
    eta: datetime.datetime | None = None,
    using: str | None = None,
) -> DelayedTask:
    """Schedule a failed task again, with a fresh set of attempts.

    The task keeps its id, name, queue, arguments and dedupe key. It becomes
    ``scheduled`` again, due after ``delay`` or at ``eta`` (given as in
    :func:`schedule`; with neither it runs as soon as possible), with
    ``attempts`` back at 0, so that it gets ``max_attempts`` more runs, and
    ``finished_at`` cleared. ``last_error`` and ``last_traceback`` are kept
    until its next run replaces them (a success clears them).

    Transactional like :func:`reschedule`: the row is written in the
    caller's transaction (or its own, in autocommit), and after the commit
    the task is indexed in Redis and ``task_scheduled`` is sent.

    :param task_or_id: the task, its id, or the id as a string.
    :raises TaskNotFound: no task has this id.
    :raises InvalidTaskState: the task is not ``failed``.
    :raises DuplicateTask: the task has a dedupe key, and another scheduled
        or running task holds that key now.
    :raises InvalidSchedule: a bad ``delay`` or ``eta``, or the task would
        be due at or after its ``expires_at`` (an expired task cannot be
        retried: schedule a new one).
    :returns: the updated row.
    """
    if task_or_id is None:
        raise InvalidArgument("retry() needs the task to retry, or its id.")
    now = timezone.now()
    run_at = resolve_run_at(delay, eta, now=now)
    lookup = parse_lookup(task_or_id, None)
    db = write_alias(using)
    row: DelayedTask | None = None
    refusal: Exception | None = None
    # savepoint=False as in cancel(): nothing raises through this block, so
    # the caller's transaction stays usable whatever the outcome.
    with transaction.atomic(using=db, savepoint=False):
        try:
            # Write first (see cancel()), fenced on status. The UPDATE has a
            # savepoint of its own: taking back a key that another active
            # task holds now violates the active-key index, and only the
            # savepoint is rolled back then, not the caller's transaction.
            with transaction.atomic(using=db):
                updated = transitions.restart(matching(lookup, db), run_at, now)
        except IntegrityError:
            updated = 0
            refusal = _retry_key_clash(lookup, db)
        if updated:
            row = written(lookup, db, status=Status.SCHEDULED, run_at=run_at)
            index_after_commit([row], OutboxEntry.Action.RESCHEDULE, db)
            signals.send_on_commit(signals.task_scheduled, [row], db)
        elif refusal is None:
            row = current(lookup, db)
            if row is not None:
                expired = _past_expiry(row, run_at, now, "retry")
                refusal = expired or _retry_refusal(row)
    # Raised only after the block, so the caller's transaction stays usable.
    if refusal is not None:
        raise refusal
    if row is None:
        raise TaskNotFound(f"No task with {lookup}; there is nothing to retry.")
    if isinstance(task_or_id, DelayedTask):
        task_or_id.status, task_or_id.run_at = Status.SCHEDULED, run_at
        task_or_id.attempts, task_or_id.finished_at = 0, None
    return row


def _past_expiry(
    row: DelayedTask, run_at: datetime.datetime, now: datetime.datetime, verb: str
) -> InvalidSchedule | None:
    """Why ``row`` (of the status ``verb`` needs) was left alone: due at
    ``run_at`` it would not start before its ``expires_at``; None if that
    is not why."""
    expected = Status.SCHEDULED if verb == "reschedule" else Status.FAILED
    expires_at = row.expires_at
    if row.status != expected or expires_at is None:
        return None
    due = max(run_at, now)
    if expires_at > due:
        return None
    if expires_at <= now:
        return InvalidSchedule(
            f"Task {row.pk} expired at {expires_at.isoformat()}: it can no "
            f"longer run, so {verb}() would change nothing. schedule() a new "
            f"task to run it."
        )
    return InvalidSchedule(
        f"Task {row.pk} expires at {expires_at.isoformat()}; {verb}() to "
        f"{due.isoformat()} would make it due then or later, so it could never "
        f"run. Pass an earlier delay= or eta=, or schedule() a new task with "
        f"a later expires=."
    )


def _retry_refusal(row: DelayedTask) -> InvalidTaskState:
    """Say why ``row`` (not failed when the UPDATE ran) cannot be retried."""
    if row.status == Status.FAILED:
        # It was running a moment ago and has failed in between.
        return InvalidTaskState(f"Task {row.pk} changed state meanwhile; try again.")
    advice = {
        Status.SCHEDULED: "it will run anyway; reschedule() moves it",
        Status.RUNNING: "it is running now",
        Status.SUCCEEDED: "schedule() a new task to run it again",
        Status.CANCELLED: "schedule() a new task to run it again",
    }.get(Status(row.status), "")
    return InvalidTaskState(
        f"Task {row.pk} is {row.status}; only failed tasks can be retried ({advice})."
    )


def _retry_key_clash(lookup: Lookup, db: str) -> DuplicateTask:
    """Describe the active task that holds the failed task's key now."""
    row = current(lookup, db)
    key = "" if row is None or row.key is None else row.key
    holder = (
        DelayedTask.objects.using(db)
        .filter(key=key, status__in=ACTIVE_STATUSES)
        .only("id", "status")
        .first()
    )
    if holder is None:
        # The holder finished between the UPDATE and this read.
        return DuplicateTask(
            f"Task {lookup.task_id} cannot be retried yet: key={key!r} was "
            f"held by another active task a moment ago; try again.",
            key=key,
        )
    return DuplicateTask(
        f"Task {lookup.task_id} cannot be retried: its key={key!r} is held by "
        f"{holder.status} task {holder.pk}. Cancel that task, or wait until "
        f"it finishes, then retry.",
        key=key,
        existing_id=holder.pk,
    )


# -- from async code: see django_delayq.api -------------------------------------


async def acancel(
    task_or_id: DelayedTask | uuid.UUID | str | None = None,
    *,
    key: str | None = None,
    using: str | None = None,
) -> bool:
    """:func:`~django_delayq.cancel`, from async code."""
    return await sync_to_async(cancel, thread_sensitive=True)(
        task_or_id, key=key, using=using
    )


async def areschedule(
    task_or_id: DelayedTask | uuid.UUID | str | None = None,
    *,
    key: str | None = None,
    delay: float | datetime.timedelta | None = None,
    eta: datetime.datetime | None = None,
    meta: Mapping[str, Any] | None = None,
    using: str | None = None,
) -> DelayedTask:
    """:func:`~django_delayq.reschedule`, from async code."""
    return await sync_to_async(reschedule, thread_sensitive=True)(
        task_or_id, key=key, delay=delay, eta=eta, meta=meta, using=using
    )


async def aretry(
    task_or_id: DelayedTask | uuid.UUID | str,
    *,
    delay: float | datetime.timedelta | None = None,
    eta: datetime.datetime | None = None,
    using: str | None = None,
) -> DelayedTask:
    """:func:`~django_delayq.retry`, from async code."""
    return await sync_to_async(retry, thread_sensitive=True)(
        task_or_id, delay=delay, eta=eta, using=using
    )
