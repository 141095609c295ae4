"""Recording how an attempt ended: the next attempt or the failure, the
expiry, the success's report, and the task event lines.

Every process that settles an attempt comes here: a worker running a task
alone or in a group, a worker giving up on a stuck task, a supervisor's
rescue of a dead worker process's task, and the sweeper recovering a task
whose worker is gone. Each row change itself is a fenced UPDATE of
:mod:`django_delayq.transitions`; this module decides which one, indexes the
retry, and logs and signals once the change is committed.

The task event lines (``task started``, ``succeeded``, ``retrying``,
``failed``, ``expired``) go to the ``django_delayq.execution`` logger,
whose name the documentation gives operators to route them by.
"""

from __future__ import annotations

import datetime
import enum
import logging
import random
import traceback
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from . import signals, transitions
from .conf import get_settings
from .models import DelayedTask, OutboxEntry, Status, write_db
from .options import FAIL_NOW
from .outbox import index_after_commit
from .timing import ceil_ms, moment_text

if TYPE_CHECKING:
    from .options import NextAttempt
    from .registry import Task

#: The task events' logger. Its name is documented (operators route these
#: lines by it), so it does not follow this module's.
events = logging.getLogger("django_delayq.execution")
logger = logging.getLogger(__name__)


class Verdict(enum.Enum):
    """What recording a failed attempt did."""

    RETRYING = "retrying"
    FAILED = "failed"
    FENCED = "fenced"  # the attempt is not this worker's any more


def worker_lost(row: DelayedTask, detail: str = "") -> str:
    """The error of an attempt whose worker was lost, ``detail`` saying how
    we know (as the documentation quotes it: ``worker lost during attempt N
    of M``, then the detail)."""
    return f"worker lost during attempt {row.attempts} of {row.max_attempts}{detail}"


def record_failure(
    row: DelayedTask,
    exc: BaseException,
    *,
    error: str | None = None,
    trace: str | None = None,
    task: Task[Any, Any] | None = None,
    raised: bool = True,
) -> Verdict:
    """Schedule the next attempt of ``row``, or fail the task.

    ``task`` (the registered task that ran) may decide what the failure
    leads to (:meth:`~django_delayq.registry.Task.next_attempt`); without
    a decision, a retry after the backoff while attempts are left.

    ``raised`` is False when ``exc`` only stands for a failure that raised
    nothing (a worker lost): the signals then carry ``exception=None``.

    Runs in the caller's transaction if there is one (a group's), else in
    its own; the log line and signal follow the commit either way.
    """
    attempt = row.attempts
    error = f"{type(exc).__name__}: {exc}" if error is None else error
    trace = traceback.format_exc() if trace is None else trace
    decided = _decision(task, exc, row)
    exception = exc if raised else None
    if decided is None:
        retrying = attempt < row.max_attempts
        delay = retry_delay(attempt) if retrying else None
        budget = None
    else:
        retrying = decided.delay is not None
        delay, budget = decided.delay, decided.max_attempts
        if budget is not None and budget <= row.max_attempts:
            budget = None
        if retrying and budget is None and attempt >= row.max_attempts:
            retrying = False  # no attempt left, and the task gave none
    run_at = None if not retrying or delay is None else ceil_ms(timezone.now() + delay)
    if run_at is not None and row.expires_at is not None and run_at >= row.expires_at:
        # The retry could never start: the task fails now, with its error,
        # rather than wait to be cancelled when the retry is due.
        error = (
            f"{error} (not retried: the next attempt would be due after the "
            f"task expires, at {moment_text(row.expires_at)})"
        )
        run_at = None
    if run_at is None:
        failed = fail(row, attempt, error, trace, expect=Status.RUNNING, exc=exception)
        return Verdict.FAILED if failed else Verdict.FENCED
    db = write_db()
    with transaction.atomic(using=db, savepoint=False):
        if not transitions.retry_later(
            row, attempt, run_at, error, trace, db, max_attempts=budget
        ):
            return Verdict.FENCED
        error = row.last_error  # as the row keeps it (clipped), for the report
        # The retry goes through the same due-set as any delayed task.
        index_after_commit([row], OutboxEntry.Action.RESCHEDULE, db)

        def report() -> None:
            fields = {"error": repr(error), "retry_at": run_at.isoformat()}
            log_event(logging.WARNING, "retrying", row, **fields)
            signals.send(
                signals.task_retried,
                row,
                error=error,
                run_at=run_at,
                exception=exception,
            )

        transaction.on_commit(report, using=db)
    return Verdict.RETRYING


def registered_task(row: DelayedTask) -> Task[Any, Any] | None:
    """The task of ``row`` in this process, for :func:`record_failure`'s
    ``task`` where the caller has only the row; None if none is
    registered."""
    from .exceptions import TaskNotRegistered
    from .registry import get

    try:
        return get(row.name)
    except TaskNotRegistered:
        return None


def _decision(
    task: Task[Any, Any] | None, exc: BaseException, row: DelayedTask
) -> NextAttempt | None:
    """The task's decision on this failure; a decision that raises fails
    the task with the error (not the worker, not a group's neighbours)."""
    if task is None:
        return None
    try:
        return task.next_attempt(exc, row.attempts, row.max_attempts)
    except Exception:
        logger.exception(
            "task %s: deciding what its failure leads to raised; it fails now",
            row.pk,
        )
        return FAIL_NOW


def fail(
    row: DelayedTask,
    attempt: int,
    error: str,
    trace: str,
    *,
    expect: str,
    exc: BaseException | None = None,
) -> bool:
    """Mark the task failed, fenced on ``expect`` status and the attempt.

    The log line and ``task_failed`` follow the commit (at once outside a
    transaction); the signal carries ``exc``, the exception the attempt
    raised (None when nothing raised: a worker lost).
    """
    db = write_db()
    if not transitions.fail(row, attempt, error, trace, expect=expect, using=db):
        return False
    # As the row keeps them (clipped), for the log line and the signal.
    error, trace = row.last_error, row.last_traceback

    def report() -> None:
        log_event(logging.ERROR, "failed", row, trace=trace, error=repr(error))
        signals.send(signals.task_failed, row, error=error, exception=exc)

    transaction.on_commit(report, using=db)
    return True


def expire(row: DelayedTask, now: datetime.datetime) -> bool:
    """Cancel a claimed task whose ``expires_at`` has passed by ``now``,
    without calling its function; False if the attempt was fenced.

    The ``task expired`` line and ``task_cancelled`` follow the commit (at
    once outside a transaction).
    """
    assert row.expires_at is not None
    which = "it" if row.attempts <= 1 else f"attempt {row.attempts}"
    error = f"expired at {moment_text(row.expires_at)}, before {which} could start"
    db = write_db()
    if not transitions.expire(row, now, error, db):
        return False

    def report() -> None:
        log_event(logging.INFO, "expired", row, error=repr(row.last_error))
        signals.send(signals.task_cancelled, row)

    transaction.on_commit(report, using=db)
    return True


def report_start(row: DelayedTask) -> None:
    """Log and signal that the current attempt of ``row`` starts now."""
    log_event(logging.DEBUG, "started", row)
    signals.send(signals.task_started, row)


def report_success(row: DelayedTask) -> None:
    """Log and signal a success, once it is committed."""
    log_event(logging.INFO, "succeeded", row)
    signals.send(signals.task_succeeded, row, result=row.result)


def log_event(
    level: int, event: str, row: DelayedTask, *, trace: str = "", **fields: object
) -> None:
    """One key=value line per task event, easy to grep and to parse; then
    ``trace`` (a failed task's traceback), if any, on the lines below."""
    if not events.isEnabledFor(level):
        return
    values = {
        "id": row.pk,
        "name": row.name,
        "queue": row.queue,
        "attempt": f"{row.attempts}/{row.max_attempts}",
        **fields,
    }
    # A retry has already moved run_at to the next attempt.
    if event != "retrying" and row.started_at is not None:
        values["late_ms"] = int(row.start_lateness() * 1000)
    if row.started_at is not None and row.finished_at is not None:
        elapsed = (row.finished_at - row.started_at).total_seconds()
        values["duration_ms"] = int(elapsed * 1000)
    events.log(
        level,
        "task %s %s%s",
        event,
        " ".join(f"{key}={value}" for key, value in values.items()),
        f"\n{trace.rstrip()}" if trace else "",
        extra={"delayq_event": event, "delayq_task_id": str(row.pk)},
    )


def retry_delay(attempt: int) -> datetime.timedelta:
    """Delay before retry ``attempt + 1``: exponential, capped, with jitter.

    ``RETRY_BACKOFF * 2 ** (attempt - 1)`` capped at ``RETRY_BACKOFF_MAX``,
    then scaled by a random factor in [0.5, 1] so that tasks which failed
    together do not retry together.
    """
    settings = get_settings()
    base = min(settings.retry_backoff * 2 ** (attempt - 1), settings.retry_backoff_max)
    return datetime.timedelta(seconds=base * random.uniform(0.5, 1.0))
