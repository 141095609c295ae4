"""``schedule()``, ``schedule_many()``, ``cancel()`` and ``reschedule()``.

Every function writes the task row in the caller's transaction (or in its own
when there is none) and touches Redis only from ``transaction.on_commit``:

* a rolled-back transaction or savepoint leaves no row and no Redis member;
* a Redis failure after the commit never reaches the caller: the task goes to
  the outbox and the sweeper replays it.

All validation happens before the first write, so bad input writes nothing.
"""

from __future__ import annotations

import contextlib
import datetime
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, router, transaction
from django.db.models import QuerySet
from django.utils import timezone

from . import registry, signals, transitions
from .conf import get_settings
from .exceptions import (
    DuplicateTask,
    InvalidArgument,
    InvalidTaskState,
    TaskNotFound,
)
from .ids import shard_of, uuid7
from .inserts import insert_rows, new_row
from .models import ACTIVE_STATUSES, DelayedTask, OutboxEntry, Status
from .outbox import index_after_commit, unindex_after_commit
from .payload import check_payload
from .text import check_text
from .timing import resolve_run_at

MAX_KEY_LENGTH = 200


@dataclass(frozen=True)
class Call:
    """One task call for :func:`schedule_many`; fields as in :func:`schedule`."""

    task: Any
    args: Sequence[Any] = ()
    kwargs: dict[str, Any] | None = None
    delay: float | datetime.timedelta | None = None
    eta: datetime.datetime | None = None
    queue: str | None = None
    key: str | None = None
    max_attempts: int | None = None


def schedule(
    fn_or_name: Any,
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    delay: float | datetime.timedelta | None = None,
    eta: datetime.datetime | None = None,
    queue: str | None = None,
    key: str | None = None,
    replace: bool = False,
    max_attempts: int | None = None,
    using: str | None = None,
) -> DelayedTask:
    """Schedule a registered task to run after ``delay`` seconds or at ``eta``.

    :param fn_or_name: a ``@task`` function or its registered name.
    :param args: positional arguments, JSON-serializable.
    :param kwargs: keyword arguments, JSON-serializable.
    :param delay: seconds (int, float or ``timedelta``) from now.
    :param eta: an aware ``datetime``. Pass at most one of ``delay`` and
        ``eta``; with neither the task runs as soon as possible.
    :param queue: overrides the task's queue.
    :param key: a dedupe key: at most one scheduled or running task holds it.
        Scheduling a held key raises :class:`~django_delayq.exceptions.DuplicateTask`
        unless ``replace=True``, which cancels the scheduled holder first.
    :param replace: with ``key``, cancel the scheduled task holding the key
        and schedule this one in its place. A running holder cannot be
        replaced (:class:`~django_delayq.exceptions.DuplicateTask`).
    :param max_attempts: overrides the task's ``max_attempts``.
    :param using: the database alias; defaults to the router's choice.
    :returns: the saved :class:`~django_delayq.models.DelayedTask`.
    """
    if not isinstance(replace, bool):
        raise InvalidArgument(f"replace= must be True or False; got {replace!r}.")
    if replace and key is None:
        raise InvalidArgument(
            "replace=True needs key=: it replaces the task holding that key."
        )
    task = _prepare(
        Call(fn_or_name, args, kwargs, delay, eta, queue, key, max_attempts)
    )
    db = _db(using)
    if key is None:
        # A UUID primary key cannot conflict, so a plain INSERT is enough: it
        # joins the caller's transaction, or commits on its own in autocommit.
        task.save(force_insert=True, using=db)
        index_after_commit([task], OutboxEntry.Action.SCHEDULE, db)
        signals.send_on_commit(signals.task_scheduled, [task], db)
        return task
    # A savepoint (when the caller has a transaction): if the key is held,
    # the failed INSERT and any replacement are undone and the caller's
    # transaction stays usable (PostgreSQL aborts it on a failed statement).
    with _key_clash_as_duplicate([key], db), transaction.atomic(using=db):
        if replace:
            _release_key(key, db)
        task.save(force_insert=True, using=db)
        index_after_commit([task], OutboxEntry.Action.SCHEDULE, db)
        signals.send_on_commit(signals.task_scheduled, [task], db)
    return task


def schedule_many(
    calls: Iterable[Call], *, using: str | None = None
) -> list[DelayedTask]:
    """Schedule many tasks with one bulk write and one Redis round trip.

    All calls are validated before anything is written; a bad call or a held
    key fails the whole batch.
    """
    tasks = []
    seen_keys: dict[str, int] = {}
    now = timezone.now()
    targets: dict[tuple[Any, ...], _Target] = {}
    for position, call in enumerate(calls):
        if not isinstance(call, Call):
            raise TypeError(
                f"schedule_many() takes Call objects; item {position} is a "
                f"{type(call).__name__}."
            )
        task = _prepare(call, now, targets)
        if task.key is not None:
            if task.key in seen_keys:
                raise DuplicateTask(
                    f"key={task.key!r} appears twice in the batch (items "
                    f"{seen_keys[task.key]} and {position}).",
                    key=task.key,
                )
            seen_keys[task.key] = position
        tasks.append(task)
    if not tasks:
        return []
    db = _db(using)
    with _key_clash_as_duplicate(seen_keys, db), transaction.atomic(using=db):
        insert_rows(tasks, db)
        index_after_commit(tasks, OutboxEntry.Action.SCHEDULE, db)
        signals.send_on_commit(signals.task_scheduled, tasks, db)
    return tasks


def cancel(
    task_or_id: DelayedTask | uuid.UUID | str | None = None,
    *,
    key: str | None = None,
    using: str | None = None,
) -> bool:
    """Cancel a scheduled task, by task, id or dedupe key.

    :returns: ``True`` if this call cancelled it; ``False`` if there is no
        such task or it is no longer scheduled (running, finished or already
        cancelled). A running task is not interrupted.
    """
    lookup = _lookup(task_or_id, key)
    db = _db(using)
    # savepoint=False: no extra SAVEPOINT round trips inside the caller's
    # transaction. Nothing below raises on purpose (a raise through this block
    # would mark the caller's transaction for rollback).
    now = timezone.now()
    with transaction.atomic(using=db, savepoint=False):
        # Write first, fenced on status (a worker that claimed the row first
        # wins), then read what was written. Reading first and then writing
        # would fail at once on SQLite ("database is locked") whenever
        # another process wrote in between; the UPDATE instead waits for
        # the lock like any write.
        if not transitions.cancel(_matching(lookup, db), now):
            return False
        row = _written(lookup, db, status=Status.CANCELLED, finished_at=now)
        unindex_after_commit([row], OutboxEntry.Action.CANCEL, db)
        row.status, row.finished_at = Status.CANCELLED, now
        signals.send_on_commit(signals.task_cancelled, [row], db)
    if isinstance(task_or_id, DelayedTask):
        task_or_id.status = Status.CANCELLED
        task_or_id.finished_at = now
    return True


def reschedule(
    task_or_id: DelayedTask | uuid.UUID | str | None = None,
    *,
    key: str | None = None,
    delay: float | datetime.timedelta | None = None,
    eta: datetime.datetime | None = None,
    using: str | None = None,
) -> DelayedTask:
    """Move a scheduled task to a new time (``delay``, ``eta``, or now).

    :raises TaskNotFound: no task has this id, or no scheduled or running
        task holds this key.
    :raises InvalidTaskState: the task is running, finished or cancelled.
    :returns: the updated row.
    """
    run_at = resolve_run_at(delay, eta)
    lookup = _lookup(task_or_id, key)
    db = _db(using)
    raise_state = ""
    with transaction.atomic(using=db, savepoint=False):
        # Write first (see cancel()), then read what was written.
        if transitions.move(_matching(lookup, db), run_at):
            row: DelayedTask | None = _written(
                lookup, db, status=Status.SCHEDULED, run_at=run_at
            )
            assert row is not None
            index_after_commit([row], OutboxEntry.Action.RESCHEDULE, db)
        else:
            row = _current(lookup, db)
            if row is not None and row.status == Status.SCHEDULED:
                # It was running a moment ago and a retry made it scheduled
                # again in between: report that rather than guess.
                raise_state = f"Task {row.pk} changed state meanwhile; try again."
                row = None
    # Raised only after the block, so the caller's transaction stays usable.
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
    return row


@dataclass(frozen=True)
class _Target:
    """What a call resolves to before its payload: task name, queue, attempts."""

    name: str
    queue: str
    shards: int
    max_attempts: int


def _target(call: Call) -> _Target:
    settings = get_settings()
    registered = registry.resolve(call.task)
    if call.queue is not None and not isinstance(call.queue, str):
        raise InvalidArgument(
            f"queue= must be a queue name (a str from DELAYQ['QUEUES']), not "
            f"{type(call.queue).__name__} ({call.queue!r})."
        )
    queue_name = call.queue if call.queue is not None else registered.queue
    queue = settings.queue("default" if queue_name is None else queue_name)
    max_attempts = call.max_attempts
    if max_attempts is None:
        max_attempts = registered.max_attempts or settings.max_attempts
    registry.validate_max_attempts(max_attempts, where="max_attempts=")
    return _Target(registered.name, queue.name, queue.shards, max_attempts)


def _prepare(
    call: Call,
    now: datetime.datetime | None = None,
    targets: dict[tuple[Any, ...], _Target] | None = None,
) -> DelayedTask:
    """Validate one call and return its unsaved row (no I/O).

    ``schedule_many()`` passes one ``now`` for the whole batch (every delay
    counts from the same instant, and the clock is read once) and a
    ``targets`` cache, so that a batch of calls to the same task resolves the
    task, queue and attempts once.
    """
    if targets is None:
        target = _target(call)
    else:
        # Only hashable, well-typed lookups are cached; anything else takes
        # the checked path and gets its precise error there.
        cacheable = (
            isinstance(call.task, registry.Task | str)
            and isinstance(call.queue, str | None)
            and isinstance(call.max_attempts, int | None)
        )
        cache_key = (call.task, call.queue, call.max_attempts)
        found = targets.get(cache_key) if cacheable else None
        if found is None:
            found = _target(call)
            if cacheable:
                targets[cache_key] = found
        target = found
    if now is None:
        now = timezone.now()
    run_at = resolve_run_at(call.delay, call.eta, now=now)
    args, kwargs = check_payload(
        call.args, call.kwargs, max_bytes=get_settings().max_payload_bytes
    )
    if call.key is not None:
        if not isinstance(call.key, str) or not 0 < len(call.key) <= MAX_KEY_LENGTH:
            raise InvalidArgument(
                f"key= must be a non-empty string of at most {MAX_KEY_LENGTH} "
                f"characters; got {call.key!r}."
            )
        check_text(call.key, "key=", InvalidArgument)
    task_id = uuid7()
    return new_row(
        {
            "id": task_id,
            "name": target.name,
            "queue": target.queue,
            "shard": shard_of(task_id, target.shards),
            "args": args,
            "kwargs": kwargs,
            "key": call.key,
            "run_at": run_at,
            "status": Status.SCHEDULED,
            "attempts": 0,
            "max_attempts": target.max_attempts,
            "claim_entry": "",
            "worker_ids": [],
            "created_at": now,
            "started_at": None,
            "finished_at": None,
            "result": None,
            "last_error": "",
            "last_traceback": "",
        }
    )


@contextlib.contextmanager
def _key_clash_as_duplicate(keys: Iterable[str | None], db: str) -> Iterator[None]:
    """Turn a violation of the active-key constraint into :class:`DuplicateTask`.

    Wraps an ``atomic()`` block, so the failed statement is already rolled
    back and the holder can be looked up.
    """
    try:
        yield
    except IntegrityError:
        wanted = [key for key in keys if key is not None]
        # The status is tested here, not in SQL: given "status IN (...)" as
        # well, SQLite's planner reads every scheduled row through the status
        # index instead of the few rows these keys have.
        holder = next(
            (
                row
                for row in DelayedTask.objects.using(db)
                .filter(key__in=wanted)
                .only("id", "key", "status")
                if row.status in ACTIVE_STATUSES
            ),
            None,
        )
        if holder is None or holder.key is None:
            raise
        if holder.status == Status.RUNNING:
            advice = (
                "It is already running and cannot be replaced; schedule again "
                "after it finishes."
            )
        else:
            advice = (
                "Pass replace=True to cancel it and schedule this one, or "
                "cancel it first."
            )
        raise DuplicateTask(
            f"key={holder.key!r} is held by {holder.status} task {holder.pk}. {advice}",
            key=holder.key,
            existing_id=holder.pk,
        ) from None


def _release_key(key: str, db: str) -> None:
    """Cancel the scheduled task holding ``key`` (for ``replace=True``).

    A running holder is left alone: the INSERT that follows then fails on the
    key, and the caller gets DuplicateTask saying the holder is running.
    """
    now = timezone.now()
    lookup = _Lookup(key=key)
    if not transitions.cancel(_matching(lookup, db), now):
        return
    holder = _written(lookup, db, status=Status.CANCELLED, finished_at=now)
    unindex_after_commit([holder], OutboxEntry.Action.CANCEL, db)
    signals.send_on_commit(signals.task_cancelled, [holder], db)


@dataclass(frozen=True)
class _Lookup:
    task_id: uuid.UUID | None = None
    key: str | None = None

    def __str__(self) -> str:
        return f"key={self.key!r}" if self.key is not None else f"id {self.task_id}"


def _lookup(task_or_id: object, key: str | None) -> _Lookup:
    """Validate "a task, an id or a key" before any database work."""
    if (task_or_id is None) == (key is None):
        raise InvalidArgument("Pass a task (or its id) or key=, exactly one of them.")
    if key is not None:
        if not isinstance(key, str):
            raise InvalidArgument(f"key= must be a string; got {key!r}.")
        return _Lookup(key=check_text(key, "key=", InvalidArgument))
    if isinstance(task_or_id, DelayedTask):
        return _Lookup(task_id=task_or_id.pk)
    if isinstance(task_or_id, uuid.UUID):
        return _Lookup(task_id=task_or_id)
    if isinstance(task_or_id, str):
        try:
            return _Lookup(task_id=uuid.UUID(task_or_id))
        except ValueError:
            raise InvalidArgument(
                f"{task_or_id!r} is not a task id (a UUID)."
            ) from None
    raise TypeError(
        f"Expected a DelayedTask, a UUID or a UUID string, not "
        f"{type(task_or_id).__name__}."
    )


def _matching(lookup: _Lookup, db: str) -> QuerySet[DelayedTask]:
    rows = DelayedTask.objects.using(db)
    if lookup.key is not None:
        return rows.filter(key=lookup.key)
    assert lookup.task_id is not None
    return rows.filter(pk=lookup.task_id)


def _written(lookup: _Lookup, db: str, **values: Any) -> DelayedTask:
    """Read back the row an UPDATE in this transaction just wrote ``values`` to."""
    row = _matching(lookup, db).filter(**values).order_by("-created_at").first()
    assert row is not None, "the row updated in this transaction is gone"
    return row


def _current(lookup: _Lookup, db: str) -> DelayedTask | None:
    """The row a lookup names: the active one for a key, any for an id."""
    rows = _matching(lookup, db)
    if lookup.key is not None:
        rows = rows.filter(status__in=ACTIVE_STATUSES)
    return rows.first()


def _db(using: str | None) -> str:
    """Return the database alias to write to, refusing manual transactions.

    Redis is written from ``on_commit``, which needs either autocommit or an
    ``atomic()`` block; checking first means nothing is written in vain.
    """
    db = router.db_for_write(DelayedTask)
    if using is not None and using != db:
        # Workers and sweepers read rows from the router's write database;
        # a row written elsewhere would never run.
        raise InvalidArgument(
            f"using={using!r}: task rows live in the database the router picks "
            f"for writing DelayedTask ({db!r}), where the workers read them. "
            f"Route DelayedTask to {using!r} in your database router, or omit "
            f"using=."
        )
    connection = transaction.get_connection(db)
    if not connection.in_atomic_block and not connection.get_autocommit():
        raise transaction.TransactionManagementError(
            "django-delayq needs autocommit or transaction.atomic(): with "
            "set_autocommit(False) it cannot know when your transaction "
            "commits. Wrap the call in transaction.atomic() instead."
        )
    return db


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
    :returns: the updated row.
    """
    if task_or_id is None:
        raise InvalidArgument("retry() needs the task to retry, or its id.")
    run_at = resolve_run_at(delay, eta)
    lookup = _lookup(task_or_id, None)
    db = _db(using)
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
                updated = transitions.restart(_matching(lookup, db), run_at)
        except IntegrityError:
            updated = 0
            refusal = _retry_key_clash(lookup, db)
        if updated:
            row = _written(lookup, db, status=Status.SCHEDULED, run_at=run_at)
            index_after_commit([row], OutboxEntry.Action.RESCHEDULE, db)
            signals.send_on_commit(signals.task_scheduled, [row], db)
        elif refusal is None:
            row = _current(lookup, db)
            if row is not None:
                refusal = _retry_refusal(row)
    # Raised only after the block, so the caller's transaction stays usable.
    if refusal is not None:
        raise refusal
    if row is None:
        raise TaskNotFound(f"No task with {lookup}; there is nothing to retry.")
    if isinstance(task_or_id, DelayedTask):
        task_or_id.status, task_or_id.run_at = Status.SCHEDULED, run_at
        task_or_id.attempts, task_or_id.finished_at = 0, None
    return row


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


def _retry_key_clash(lookup: _Lookup, db: str) -> DuplicateTask:
    """Describe the active task that holds the failed task's key now."""
    row = _current(lookup, db)
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


# Task.schedule() calls schedule(); registry cannot import this module, which
# imports it.
registry.use_scheduler(schedule)
