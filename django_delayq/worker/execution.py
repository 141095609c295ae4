"""Running one task on its own: decide from the row, claim it, run it, record it.

Most tasks are claimed and run in groups (:mod:`django_delayq.worker.group_commit`);
this module is the path for everything a group does not take: a delivery
whose row is not simply scheduled and due (early, running, finished,
missing), a task registered with ``atomic=False``, a task this worker does
not know, and a group's tasks after the group was fenced (each run again
by :func:`run_alone`). What both paths need to call a function (refusals,
time limits, the stored return value, the fence) is
:mod:`django_delayq.worker.attempts`; recording an outcome is
:mod:`django_delayq.outcomes`'.

For ``atomic`` tasks (the default) the function and the success UPDATE
share one transaction. If the outcome is fenced (this worker was paused past
its visibility timeout and another worker took the task over), the
transaction rolls back the function's database writes with it: a stale
worker's late completion has no effect.

:func:`execute` decides from a stream delivery; :func:`claim_and_run` is
the entry for a row already judged to run now, which the testing toolkit
also uses.
"""

from __future__ import annotations

import enum
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from .. import changes, registry, transitions
from ..conf import get_settings
from ..exceptions import (
    TaskNotRegistered,
)
from ..limits.slots import note_start
from ..models import DelayedTask, OutboxEntry, Status, write_db
from ..outbox import index_after_commit
from ..outcomes import (
    Verdict,
    expire,
    fail,
    record_failure,
    report_start,
    report_success,
    worker_lost,
)
from ..ownership import check_prefix
from ..recurring import planner
from ..recurring.ticks import schedule_of_key
from ..store.keys import shard_keys
from .attempts import (
    FAILURES,
    Fenced,
    cancelled_meanwhile,
    expired,
    failure_text,
    log_fenced,
    refusal,
    refuse,
    run_attempt,
    stored_value,
    time_limit_of,
)
from .time_limits import NO_WATCHDOG, Watchdog

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
LEAVE = Outcome(Disposition.LEAVE)

#: An entry this close to its task's run_at (by this worker's clock) is held
#: until then instead of being put back in the due-set.
EARLY_WAIT_SECONDS = 1.0


def execute(
    task_id: uuid.UUID,
    *,
    worker: str,
    stream: str,
    entry_id: str,
    early_wait: float = EARLY_WAIT_SECONDS,
    watchdog: Watchdog = NO_WATCHDOG,
) -> Outcome:
    """Run the task ``task_id``, delivered by entry ``entry_id`` of ``stream``
    to the worker thread ``worker``, if its row says it should run now.

    Database errors propagate: the caller keeps the entry and tries again.
    """
    db = write_db()
    row = DelayedTask.objects.using(db).filter(pk=task_id).first()
    if row is None:
        # Another project's task, under a KEY_PREFIX it claimed after this
        # worker started? Then stop here rather than dead-letter its tasks.
        check_prefix()
        return Outcome(Disposition.DEAD, "no task row has this id")
    if row.status in (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED):
        return DONE  # finished or cancelled since it was dispatched
    if row.status == Status.RUNNING:
        if transitions.delivery_of(row.claim_entry) != entry_id:
            # The attempt belongs to another delivery of this task (a
            # duplicate entry, or a retry's): leave it to that one.
            return DONE
        # An entry id is unique within one stream only: the same id in
        # another stream (forged, or written by hand) is not the delivery
        # that claimed the attempt, and must not run it a second time.
        keys = shard_keys(get_settings().key_prefix, row.queue, row.shard)
        own = keys.ready_of(row.priority)
        if stream != own:
            return Outcome(
                Disposition.DEAD,
                f"entry {entry_id} of {stream} names task {row.pk}, which "
                f"{own} delivers; it is running and was not claimed by it",
            )
        # The delivery that claimed this attempt, again: reclaimed from a
        # worker that stopped heartbeating (it died, or was paused: the
        # attempt fence discards its completion if it wakes), or retried
        # here after a database error cut the attempt short.
        # Claimed alone, the attempt is this task's own: if it was its last,
        # the task fails. Claimed in a batch, it runs again alone, uncounted.
        if row.attempts >= row.max_attempts and not transitions.claimed_in_batch(row):
            fail(row, row.attempts, worker_lost(row), "", expect=Status.RUNNING)
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
    return claim_and_run(
        row, claim_entry=entry_id, worker=worker, using=db, watchdog=watchdog
    )


def claim_and_run(
    row: DelayedTask,
    *,
    claim_entry: str,
    worker: str,
    using: str,
    watchdog: Watchdog = NO_WATCHDOG,
) -> Outcome:
    """Claim ``row`` (as just read, due or taken over) and run its attempt
    alone, recording its outcome.

    The worker's one-row path once it has decided the row should run now
    (``claim_entry`` is the stream entry that delivered it), and what the
    testing toolkit runs a due row through (no stream delivered it; its
    claim says so). Returns DONE without running anything when the claim
    is lost: another worker, a cancel or a reschedule won.
    """
    if transitions.claim(row, claim_entry, timezone.now(), worker, using) is None:
        return DONE
    watchdog.hold([row])
    try:
        return start(row, watchdog)
    finally:
        watchdog.drop([row])


def start(row: DelayedTask, watchdog: Watchdog = NO_WATCHDOG) -> Outcome:
    """Run the current attempt of a row this worker has just claimed, alone."""
    try:
        registered = registry.get(row.name)
    except TaskNotRegistered as exc:
        return unknown_task(row, exc)
    if not run_alone(row, registered, watchdog):
        # Another worker took this attempt over while we were paused: the
        # entry is its now, so leave it unacknowledged.
        return LEAVE
    return DONE


def unknown_task(row: DelayedTask, exc: TaskNotRegistered) -> Outcome:
    """A claimed row whose name this worker does not know: no code runs.

    Maybe this worker runs older code than the one that scheduled it (a
    rolling deploy): the attempt fails and is retried with backoff, so an
    up-to-date worker can take it.
    """
    reason = f"task name {row.name!r} is not registered in this worker"
    verdict = record_failure(row, exc, error=reason, trace="")
    schedule = schedule_of_key(row.key)
    if (
        verdict is Verdict.RETRYING
        and schedule is not None
        and planner.is_removed(schedule)
        # No deployment will run it again. The planner cancels such ticks
        # when the schedule goes, but not one a worker held then (running,
        # it was not cancellable); checked after the retry is written, so a
        # removal committed during this attempt is seen.
        and changes.cancel(row.pk)
    ):
        logger.info(
            "task %s cancelled: a tick of periodic schedule %s, which is no "
            "longer declared in the code",
            row.pk,
            schedule,
        )
    return Outcome(Disposition.DEAD, reason) if verdict is Verdict.FAILED else DONE


def run_alone(
    row: DelayedTask,
    registered: registry.Task[Any, Any],
    watchdog: Watchdog = NO_WATCHDOG,
) -> bool:
    """Run the function and record the outcome; False if the attempt was fenced."""
    now = timezone.now()
    if expired(row, now):
        return expire(row, now)
    refused = refusal(row, registered)
    if refused is not None:
        return refuse(row, refused)
    if watchdog.cancelled_before_start(row):
        # Claimed with others, and cancelled before its turn came.
        logger.info("task %s was cancelled before it started; not run", row.pk)
        return True
    db = write_db()
    committed: list[bool] = []
    limit = time_limit_of(registered)
    started = row.started_at = timezone.now()
    report_start(row)
    try:
        if registered.atomic:
            with transaction.atomic(using=db):
                # Registered first, so it runs first at the commit: if a
                # callback the task registered raises afterwards, we still
                # know the task's work and its success were committed.
                transaction.on_commit(lambda: committed.append(True), using=db)
                with watchdog.running(row, limit) as run:
                    note_start(row)
                    value = run_attempt(registered, row, limit, run.cancelled)
                result = stored_value(row, value)
                # Fenced on running, like the cancel: if the task was
                # cancelled meanwhile, this matches nothing and the raise
                # rolls the function's writes back with it.
                if not transitions.succeed(row, result, started, timezone.now(), db):
                    raise Fenced
        else:
            with watchdog.running(row, limit) as run:
                note_start(row)
                value = run_attempt(registered, row, limit, run.cancelled)
            result = stored_value(row, value)
            if not transitions.succeed(row, result, started, timezone.now(), db):
                raise Fenced
    except Fenced:
        if cancelled_meanwhile(row, db):
            return True  # nothing to record: its entry is done with
        log_fenced(row)
        return False
    except FAILURES as exc:
        if committed:
            logger.exception(
                "task %s succeeded, but an on_commit callback it registered "
                "raised; later callbacks of that transaction did not run",
                row.pk,
            )
        else:
            # Task code calling sys.exit() (or raising KeyboardInterrupt)
            # fails its attempt like any error; it must not end the thread.
            # A cancelled task's failure is fenced (its row is cancelled):
            # nothing is recorded.
            record_failure(row, exc, error=failure_text(exc, limit), task=registered)
            return True
    report_success(row)
    return True
