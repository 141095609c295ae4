"""Running one task: claim the row, call the function, record the outcome.

The row is the truth, and every state change is a conditional UPDATE fenced on
``status`` and ``attempts``:

* claim: ``scheduled -> running``, ``attempts + 1``, only if ``run_at <= now``
  by this worker's clock (a task never starts early);
* re-claim of a task whose worker died: ``running(n) -> running(n + 1)``;
* outcome: ``running(n) -> succeeded | scheduled (retry) | failed``, also
  fenced on the stream entry that claimed attempt ``n``.

For ``atomic`` tasks (the default) the function and the success UPDATE share
one transaction. If the fence fails (this worker was paused past its
visibility timeout and another worker took the task over), the transaction
rolls back the function's database writes with it: a stale worker's late
completion has no effect.
"""

from __future__ import annotations

import datetime
import enum
import logging
import random
import time
import traceback
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from . import registry, signals
from .conf import get_settings
from .exceptions import InvalidPayload, TaskNotRegistered
from .models import DelayedTask, OutboxEntry, Status
from .payload import check_value
from .rows import claim_due, update_attempt
from .sync import index_after_commit
from .timing import ceil_ms

logger = logging.getLogger(__name__)


class Disposition(enum.Enum):
    """What the worker does with the stream entry afterwards."""

    DONE = "done"  # acknowledge and delete it
    DEAD = "dead"  # dead-letter it, with a reason
    LEAVE = "leave"  # not ours any more: another worker took it over


@dataclass(frozen=True)
class Outcome:
    disposition: Disposition
    reason: str = ""


DONE = Outcome(Disposition.DONE)

#: An entry this close to its task's run_at (by this worker's clock) is held
#: until then instead of being put back in the due-set.
EARLY_WAIT_SECONDS = 1.0


class _Fenced(Exception):
    """The row moved on under us: roll back and record nothing."""


def execute(
    task_id: uuid.UUID,
    *,
    entry_id: str,
    reclaimed: bool,
    early_wait: float = EARLY_WAIT_SECONDS,
) -> Outcome:
    """Run the task ``task_id``, delivered by stream entry ``entry_id``, if its
    row says it should run now.

    Database errors propagate: the caller keeps the entry and tries again.
    """
    db = _db()
    # The common case first: a scheduled task, due by our clock, claimed in
    # one UPDATE ... RETURNING. Anything else takes the read-then-claim path.
    # Always the primary: a replica may not have the row yet.
    row = claim_due(task_id, entry_id, timezone.now(), db)
    if row is not None:
        return _start(row, row.attempts)
    row = DelayedTask.objects.using(db).filter(pk=task_id).first()
    if row is None:
        return Outcome(Disposition.DEAD, "no task row has this id")
    if row.status in (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED):
        return DONE  # finished or cancelled since it was dispatched
    if row.status == Status.RUNNING:
        if row.claim_entry != entry_id:
            # The attempt belongs to another delivery of this task (a
            # duplicate entry, or a retry's): leave it to that one.
            return DONE
        # The delivery that claimed this attempt, again: reclaimed from a
        # worker that stopped heartbeating (it died, or was paused: the
        # attempt fence discards its completion if it wakes), or retried
        # here after a database error cut the attempt short.
        if row.attempts >= row.max_attempts:
            error = f"worker lost during attempt {row.attempts} of {row.max_attempts}"
            fail(row, row.attempts, error, "", expect=Status.RUNNING)
            return DONE
    else:
        early = (row.run_at - timezone.now()).total_seconds()
        if 0 < early <= early_wait:
            # Due by Redis' clock but not yet by ours (the clocks differ a
            # little): hold the entry (it is heartbeated) until run_at rather
            # than bounce it through the due-set.
            time.sleep(early)
        elif early > 0:
            # Dispatched well before its time (a reschedule raced the
            # dispatcher): put it back in the due-set at the row's time.
            logger.debug("task %s is not due until %s; re-delayed", row.pk, row.run_at)
            index_after_commit([row], OutboxEntry.Action.RESCHEDULE, db)
            return DONE
    attempt = _claim(row, entry_id)
    if attempt is None:
        return DONE  # another worker, a cancel or a reschedule won
    return _start(row, attempt)


def _start(row: DelayedTask, attempt: int) -> Outcome:
    """Run attempt ``attempt`` of a row this worker has just claimed."""
    try:
        registered = registry.get(row.name)
    except TaskNotRegistered as exc:
        # Maybe this worker runs older code than the one that scheduled it
        # (a rolling deploy): the attempt fails and is retried with backoff,
        # so an up-to-date worker can take it. No code runs here.
        reason = f"task name {row.name!r} is not registered in this worker"
        failed = _retry_or_fail(row, attempt, exc, error=reason, trace="")
        return Outcome(Disposition.DEAD, reason) if failed else DONE
    _log(logging.DEBUG, "started", row)
    signals.send(signals.task_started, row)
    if not _run(row, registered, attempt):
        # Another worker took this attempt over while we were paused: the
        # entry is its now, so leave it unacknowledged.
        return Outcome(Disposition.LEAVE)
    return DONE


def _log(level: int, event: str, row: DelayedTask, **fields: object) -> None:
    """One key=value line per task event, easy to grep and to parse."""
    if not logger.isEnabledFor(level):
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
        values["late_ms"] = int((row.started_at - row.run_at).total_seconds() * 1000)
    if row.started_at is not None and row.finished_at is not None:
        elapsed = (row.finished_at - row.started_at).total_seconds()
        values["duration_ms"] = int(elapsed * 1000)
    logger.log(
        level,
        "task %s %s",
        event,
        " ".join(f"{key}={value}" for key, value in values.items()),
        extra={"delayq_event": event, "delayq_task_id": str(row.pk)},
    )


def _claim(row: DelayedTask, entry_id: str) -> int | None:
    now = timezone.now()
    rows = DelayedTask.objects.using(_db()).filter(pk=row.pk, attempts=row.attempts)
    if row.status == Status.SCHEDULED:
        rows = rows.filter(status=Status.SCHEDULED, run_at__lte=now)
    else:
        rows = rows.filter(status=Status.RUNNING, claim_entry=entry_id)
    attempt = row.attempts + 1
    if not rows.update(
        status=Status.RUNNING, attempts=attempt, started_at=now, claim_entry=entry_id
    ):
        return None
    row.status, row.attempts, row.started_at = Status.RUNNING, attempt, now
    row.claim_entry = entry_id
    return attempt


def _run(row: DelayedTask, registered: registry.Task[Any, Any], attempt: int) -> bool:
    """Run the function and record the outcome; False if the attempt was fenced."""
    db = _db()
    committed: list[bool] = []
    try:
        if registered.atomic:
            with transaction.atomic(using=db):
                # Registered first, so it runs first at the commit: if a
                # callback the task registered raises afterwards, we still
                # know the task's work and its success were committed.
                transaction.on_commit(lambda: committed.append(True), using=db)
                result = registered.func(*row.args, **row.kwargs)
                _succeed(row, attempt, result)
        else:
            result = registered.func(*row.args, **row.kwargs)
            with transaction.atomic(using=db):
                _succeed(row, attempt, result)
    except _Fenced:
        logger.warning(
            "task %s: attempt %d finished after another worker took it over; "
            "its completion was discarded",
            row.pk,
            attempt,
        )
        return False
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        if committed:
            logger.exception(
                "task %s succeeded, but an on_commit callback it registered "
                "raised; later callbacks of that transaction did not run",
                row.pk,
            )
        else:
            # Task code calling sys.exit() (or raising KeyboardInterrupt)
            # fails its attempt like any error; it must not end the thread.
            _retry_or_fail(row, attempt, exc)
            return True
    _log(logging.INFO, "succeeded", row)
    signals.send(signals.task_succeeded, row, result=row.result)
    return True


def _succeed(row: DelayedTask, attempt: int, result: Any) -> None:
    try:
        stored = check_value(result, "the return value")
    except InvalidPayload as exc:
        logger.warning("task %s: %s; it is not stored", row.pk, exc)
        stored = None
    now = timezone.now()
    updated = update_attempt(
        row.pk,
        attempt,
        row.claim_entry,
        {
            "status": Status.SUCCEEDED,
            "finished_at": now,
            "result": stored,
            "last_error": "",
            "last_traceback": "",
        },
        _db(),
    )
    if not updated:
        raise _Fenced
    row.status, row.finished_at, row.result = Status.SUCCEEDED, now, stored


def _retry_or_fail(
    row: DelayedTask,
    attempt: int,
    exc: BaseException,
    *,
    error: str | None = None,
    trace: str | None = None,
) -> bool:
    """Schedule the next attempt, or fail the task; True if it failed."""
    error = f"{type(exc).__name__}: {exc}" if error is None else error
    trace = traceback.format_exc() if trace is None else trace
    if attempt >= row.max_attempts:
        return fail(row, attempt, error, trace, expect=Status.RUNNING)
    run_at = ceil_ms(timezone.now() + backoff(attempt))
    db = _db()
    with transaction.atomic(using=db):
        updated = (
            DelayedTask.objects.using(db)
            .filter(**_fence(row, attempt), status=Status.RUNNING)
            .update(
                status=Status.SCHEDULED,
                run_at=run_at,
                last_error=error,
                last_traceback=trace,
            )
        )
        if updated:
            row.status, row.run_at = Status.SCHEDULED, run_at
            row.last_error, row.last_traceback = error, trace
            # The retry goes through the same due-set as any delayed task.
            index_after_commit([row], OutboxEntry.Action.RESCHEDULE, db)
    if updated:
        _log(
            logging.WARNING,
            "retrying",
            row,
            error=repr(error),
            retry_at=run_at.isoformat(),
        )
        signals.send(signals.task_retried, row, error=error, run_at=run_at)
    return False


def fail(
    row: DelayedTask, attempt: int, error: str, trace: str, *, expect: str
) -> bool:
    """Mark the task failed, fenced on ``expect`` status and the attempt."""
    now = timezone.now()
    updated = (
        DelayedTask.objects.using(_db())
        .filter(**_fence(row, attempt), status=expect)
        .update(
            status=Status.FAILED,
            finished_at=now,
            last_error=error,
            last_traceback=trace,
        )
    )
    if updated:
        row.status, row.finished_at = Status.FAILED, now
        row.last_error, row.last_traceback = error, trace
        _log(logging.ERROR, "failed", row, error=repr(error))
        signals.send(signals.task_failed, row, error=error)
    return bool(updated)


def _fence(row: DelayedTask, attempt: int) -> dict[str, Any]:
    """The row's state an outcome may overwrite: this attempt, this delivery.

    The attempt number alone is not enough: ``retry()`` starts a failed task
    over from attempt 0, so a worker paused during attempt 3 could otherwise
    wake up and record its outcome over the new run's attempt 3. The stream
    entry that claimed the attempt tells them apart.
    """
    return {"pk": row.pk, "attempts": attempt, "claim_entry": row.claim_entry}


def backoff(attempt: int) -> datetime.timedelta:
    """Delay before retry ``attempt + 1``: exponential, capped, with jitter.

    ``RETRY_BACKOFF * 2 ** (attempt - 1)`` capped at ``RETRY_BACKOFF_MAX``,
    then scaled by a random factor in [0.5, 1] so that tasks which failed
    together do not retry together.
    """
    settings = get_settings()
    base = min(settings.retry_backoff * 2 ** (attempt - 1), settings.retry_backoff_max)
    return datetime.timedelta(seconds=base * random.uniform(0.5, 1.0))


def _db() -> str:
    from django.db import router

    return router.db_for_write(DelayedTask)
