"""``schedule()`` and ``schedule_many()``, and the public API in one place.

``cancel()``, ``reschedule()`` and ``retry()`` live in
:mod:`django_delayq.changes` and are importable from here too.

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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, transaction
from django.utils import timezone

from . import registry, signals, tracing, transitions
from .changes import acancel, areschedule, aretry, cancel, reschedule, retry
from .conf import get_settings
from .conf.middleware import ScheduleHook, get_middleware
from .db.deadlocks import retrying_deadlocks
from .db.inserts import insert_rows, new_row, plain_rows
from .exceptions import DuplicateTask, InvalidArgument, InvalidPayload, TaskRefused
from .ids import shard_of, uuid7
from .limits.groups import is_limited, limit_key
from .lookups import Lookup, matching, write_alias, written
from .models import ACTIVE_STATUSES, DelayedTask, OutboxEntry, Status
from .outbox import index_after_commit, indexer, unindex_after_commit
from .payload import check_meta, check_payload, unsupported
from .store.keys import LIMITS_SHARD
from .text import check_text
from .timing import resolve_expires_at, resolve_run_at

MAX_KEY_LENGTH = 200

__all__ = [
    "Call",
    "acancel",
    "areschedule",
    "aretry",
    "aschedule",
    "aschedule_many",
    "cancel",
    "reschedule",
    "retry",
    "schedule",
    "schedule_many",
]


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
    priority: int | None = None
    meta: Mapping[str, Any] | None = None
    expires: float | datetime.timedelta | datetime.datetime | None = None


def schedule(
    fn_or_name: Any,
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    delay: float | datetime.timedelta | None = None,
    eta: datetime.datetime | None = None,
    expires: float | datetime.timedelta | datetime.datetime | None = None,
    queue: str | None = None,
    key: str | None = None,
    replace: bool = False,
    max_attempts: int | None = None,
    priority: int | None = None,
    meta: Mapping[str, Any] | None = None,
    using: str | None = None,
) -> DelayedTask:
    """Schedule a registered task to run after ``delay`` seconds or at ``eta``.

    :param fn_or_name: a ``@task`` function or its registered name.
    :param args: positional arguments, JSON-serializable.
    :param kwargs: keyword arguments, JSON-serializable.
    :param delay: seconds (int, float or ``timedelta``) from now.
    :param eta: an aware ``datetime``. Pass at most one of ``delay`` and
        ``eta``; with neither the task runs as soon as possible.
    :param expires: when the task is no longer wanted, as Celery's
        ``expires``: seconds (int, float or ``timedelta``) from now (the
        call, not the due time), or an aware ``datetime``. It must fall
        after the task is due. A worker that would start it at or after
        that moment cancels it instead, without calling the function, and
        a retry that would fall after it is not made (the task fails).
        ``None`` (the default): it never expires.
    :param queue: overrides the task's queue.
    :param key: a dedupe key: at most one scheduled or running task holds it.
        Scheduling a held key raises :class:`~django_delayq.exceptions.DuplicateTask`
        unless ``replace=True``, which cancels the scheduled holder first.
    :param replace: with ``key``, cancel the scheduled task holding the key
        and schedule this one in its place. A running holder cannot be
        replaced (:class:`~django_delayq.exceptions.DuplicateTask`).
    :param max_attempts: overrides the task's ``max_attempts``.
    :param priority: overrides the task's ``priority`` (default 0): an
        integer from -100 to 100. Among tasks that are due, those of a higher
        band start first: high (above 0), normal (0), low (below 0).
    :param meta: metadata for the task's runs, not its arguments (a tenant,
        a request id): a dict with str keys and JSON values, at most 4 KiB of
        JSON. Merged over the task's ``@task(meta=...)``, the call's keys
        winning, then passed through the ``on_schedule()`` of
        ``DELAYQ["MIDDLEWARE"]``; the run's middleware and the function read
        it as ``current_run().meta``.
    :param using: the database alias; defaults to the router's choice.
    :returns: the saved :class:`~django_delayq.models.DelayedTask`.
    :raises TypeError: ``args`` and ``kwargs`` do not fit the task
        function's signature (nothing is written).
    :raises ~django_delayq.exceptions.InvalidSchedule: a bad ``delay``,
        ``eta`` or ``expires`` (nothing is written).
    """
    if not isinstance(replace, bool):
        raise InvalidArgument(f"replace= must be True or False; got {replace!r}.")
    if replace and key is None:
        raise InvalidArgument(
            "replace=True needs key=: it replaces the task holding that key."
        )
    task = _prepare(
        Call(
            fn_or_name,
            args,
            kwargs,
            delay,
            eta,
            queue,
            key,
            max_attempts,
            priority,
            meta,
            expires,
        )
    )
    db = write_alias(using)
    # Chosen before the row is written: a TEST_MODE that names no indexer
    # fails here, leaving nothing behind.
    indexer()
    if key is None:
        # A UUID primary key cannot conflict, so a plain INSERT is enough: it
        # joins the caller's transaction, or commits on its own in autocommit.
        task.save(force_insert=True, using=db)
        index_after_commit([task], OutboxEntry.Action.SCHEDULE, db)
        signals.send_on_commit(signals.task_scheduled, [task], db)
        return task

    def write() -> DelayedTask:
        # A savepoint (when the caller has a transaction): if the key is held,
        # the failed INSERT and any replacement are undone and the caller's
        # transaction stays usable (PostgreSQL aborts it on a failed
        # statement).
        with _key_clash_as_duplicate([key], db), transaction.atomic(using=db):
            if replace:
                _release_key(key, db)
            task.save(force_insert=True, using=db)
            index_after_commit([task], OutboxEntry.Action.SCHEDULE, db)
            signals.send_on_commit(signals.task_scheduled, [task], db)
        return task

    return retrying_deadlocks(db, write)


def schedule_many(
    calls: Iterable[Call], *, using: str | None = None
) -> list[DelayedTask]:
    """Schedule many tasks with one bulk write and one Redis round trip.

    All calls are validated before anything is written; a bad call or a held
    key fails the whole batch.
    """
    tasks = []
    seen_keys: dict[str, int] = {}
    memo = _Memo(timezone.now())
    for position, call in enumerate(calls):
        if not isinstance(call, Call):
            raise TypeError(
                f"schedule_many() takes Call objects; item {position} is a "
                f"{type(call).__name__}."
            )
        task = _prepare(call, memo, position)
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
    db = write_alias(using)
    indexer()  # as in schedule(): before anything is written

    def write() -> list[DelayedTask]:
        with _key_clash_as_duplicate(seen_keys, db), transaction.atomic(using=db):
            insert_rows(tasks, db)
            index_after_commit(tasks, OutboxEntry.Action.SCHEDULE, db)
            signals.send_on_commit(signals.task_scheduled, tasks, db)
        return tasks

    return retrying_deadlocks(db, write) if seen_keys else write()


def check_call(call: Call) -> None:
    """Refuse ``call`` as :func:`schedule` would (same exceptions), writing
    nothing: for a definition kept to schedule later, such as a periodic
    schedule edited in the admin."""
    _prepare(call)


@dataclass(frozen=True)
class _Target:
    """What a call resolves to before its payload: the task, its queue,
    attempts and priority."""

    task: registry.Task[Any, Any]
    name: str
    queue: str
    shards: int
    max_attempts: int
    priority: int
    #: under a concurrency or rate limit: indexed in the limits shard
    limited: bool = False


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
    if registered.limit_rule and queue.name != (registered.queue or "default"):
        raise InvalidArgument(
            f"{registered.name} has limits ({registered.limit_rule.describe()}), "
            f"which are counted on its own queue {registered.queue or 'default'!r}; "
            f"it cannot be scheduled on queue={queue.name!r}. Schedule it "
            f"without queue=, or declare another task for that queue."
        )
    max_attempts = call.max_attempts
    if max_attempts is None:
        max_attempts = registered.max_attempts or settings.max_attempts
    registry.validate_max_attempts(max_attempts, where="max_attempts=")
    priority = registered.priority if call.priority is None else call.priority
    registry.validate_priority(priority, where="priority=")
    return _Target(
        registered,
        registered.name,
        queue.name,
        queue.shards,
        max_attempts,
        priority,
        is_limited(registered, queue),
    )


@dataclass
class _Memo:
    """What the calls of one ``schedule_many()`` share, worked out once.

    ``now``: every delay counts from the same instant, and the clock is
    read once. ``targets``: a batch of calls to the same task resolves the
    task, queue and attempts once. ``run_at``: calls with the same delay
    get the same ``run_at``, checked and rounded once. ``plain_rows``:
    whether rows may be built without ``Model.__init__`` (see ``new_row``).
    ``max_payload_bytes``: the setting, read once. ``schedule_hooks``: the
    middleware's, looked up once.
    """

    now: datetime.datetime
    targets: dict[tuple[Any, ...], _Target] = field(default_factory=dict)
    run_at: dict[tuple[type, Any], datetime.datetime] = field(default_factory=dict)
    plain_rows: bool = field(default_factory=plain_rows)
    max_payload_bytes: int = field(
        default_factory=lambda: get_settings().max_payload_bytes
    )
    schedule_hooks: tuple[tuple[str, ScheduleHook], ...] = field(
        default_factory=lambda: get_middleware().schedule_hooks
    )


def _prepare(
    call: Call, memo: _Memo | None = None, position: int | None = None
) -> DelayedTask:
    """Validate one call and return its unsaved row (no I/O).

    ``schedule_many()`` passes what its calls share (``memo``) and the
    call's ``position`` in the batch, which an error names.
    """
    if memo is None:
        target = _target(call)
        now = timezone.now()
        run_at = resolve_run_at(call.delay, call.eta, now=now)
    else:
        now = memo.now
        target = _cached_target(call, memo.targets)
        run_at = _cached_run_at(call, memo)
    expires_at = resolve_expires_at(call.expires, run_at, now=now)
    args, kwargs = check_payload(
        call.args,
        call.kwargs,
        max_bytes=(
            get_settings().max_payload_bytes if memo is None else memo.max_payload_bytes
        ),
    )

    # A task that may not run such a row at all says so first.
    refused = target.task.row_problem(args, kwargs, call.key)
    if refused is not None:
        where = "" if position is None else f"schedule_many() item {position}: "
        raise TaskRefused(f"{where}{refused}. Nothing was written.")
    # Bound as they are stored, as the worker will bind them: a call that
    # cannot work is refused now, not when it is due.
    problem = target.task.argument_problem(args, kwargs)
    if problem is not None:
        where = "" if position is None else f"schedule_many() item {position}: "
        raise TypeError(
            f"{where}{target.name}: refused at schedule time, nothing was "
            f"written: {problem}. Pass args= and kwargs= that fit it."
        )
    if call.key is not None:
        if not isinstance(call.key, str) or not 0 < len(call.key) <= MAX_KEY_LENGTH:
            raise InvalidArgument(
                f"key= must be a non-empty string of at most {MAX_KEY_LENGTH} "
                f"characters; got {call.key!r}."
            )
        check_text(call.key, "key=", InvalidArgument)
    if target.limited:
        # A limit_by that cannot find this call's key is refused now.
        limit_key(target.task, args, kwargs)
    # Last: the middleware's hooks see only calls that are otherwise fine.
    meta = _meta(
        call.meta,
        target.task,
        get_middleware().schedule_hooks if memo is None else memo.schedule_hooks,
    )
    task_id = uuid7()
    if tracing.ENABLED:
        meta = tracing.created(
            meta, name=target.name, queue=target.queue, task_id=task_id
        )
    return new_row(
        {
            "id": task_id,
            "name": target.name,
            "queue": target.queue,
            "shard": (
                LIMITS_SHARD if target.limited else shard_of(task_id, target.shards)
            ),
            "args": args,
            "kwargs": kwargs,
            "key": call.key,
            "run_at": run_at,
            "expires_at": expires_at,
            "status": Status.SCHEDULED,
            "attempts": 0,
            "max_attempts": target.max_attempts,
            "priority": target.priority,
            "claim_entry": "",
            "worker_ids": [],
            "created_at": now,
            "started_at": None,
            "finished_at": None,
            "result": None,
            "last_error": "",
            "last_traceback": "",
            # None, not {}: NULL is "no metadata", as in rows written before
            # the column existed.
            "meta": meta or None,
        },
        plain=None if memo is None else memo.plain_rows,
    )


def _meta(
    given: Any,
    task: registry.Task[Any, Any],
    hooks: tuple[tuple[str, ScheduleHook], ...],
) -> dict[str, Any]:
    """A call's metadata: the task's, under the call's ``meta=`` (checked),
    then as each middleware's ``on_schedule()`` returns it."""
    meta = check_meta(given)
    if task.meta:
        # Checked again as a whole: for its size, and for the order of its
        # keys, as the database gives them back.
        meta = check_meta({**task.meta, **meta})
    for path, hook in hooks:
        # A dict of its own (check_meta() and the merge build new ones): the
        # hook may change it without touching the caller's or the task's.
        returned = hook(task, meta)
        where = f'{path}.on_schedule() (DELAYQ["MIDDLEWARE"])'
        if not isinstance(returned, Mapping):
            raise unsupported(
                returned,
                f"{where} returned {type(returned).__name__}, not the task's "
                f"metadata; return a dict (the one it was given, changed or "
                f"not).",
            )
        try:
            meta = check_meta(returned)
        except InvalidPayload as exc:
            raise type(exc)(
                f"{where} returned metadata that cannot be stored: {exc}"
            ) from None
    return meta


def _cached_target(call: Call, targets: dict[tuple[Any, ...], _Target]) -> _Target:
    # Only hashable, well-typed lookups are cached; anything else takes the
    # checked path and gets its precise error there.
    cacheable = (
        isinstance(call.task, registry.Task | str)
        and isinstance(call.queue, str | None)
        and isinstance(call.max_attempts, int | None)
        and isinstance(call.priority, int | None)
        and not isinstance(call.priority, bool)  # True == 1 as a key
    )
    cache_key = (call.task, call.queue, call.max_attempts, call.priority)
    found = targets.get(cache_key) if cacheable else None
    if found is None:
        found = _target(call)
        if cacheable:
            targets[cache_key] = found
    return found


def _cached_run_at(call: Call, memo: _Memo) -> datetime.datetime:
    # A delay of a plain number, with no eta, is cached under its type too:
    # 1 and 1.0 are one key otherwise, and True (refused) must be checked.
    if call.eta is not None or type(call.delay) not in (int, float):
        return resolve_run_at(call.delay, call.eta, now=memo.now)
    cache_key = (type(call.delay), call.delay)
    run_at = memo.run_at.get(cache_key)
    if run_at is None:
        run_at = memo.run_at[cache_key] = resolve_run_at(call.delay, None, now=memo.now)
    return run_at


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
    lookup = Lookup(key=key)
    if not transitions.cancel(matching(lookup, db), now):
        return
    holder = written(lookup, db, status=Status.CANCELLED, finished_at=now)
    unindex_after_commit([holder], OutboxEntry.Action.CANCEL, db)
    signals.send_on_commit(signals.task_cancelled, [holder], db)


# -- from async code ------------------------------------------------------------
#
# As Django's own a-methods do (QuerySet.aget(), Task.aenqueue()), each twin
# runs its sync one through sync_to_async(..., thread_sensitive=True): on the
# thread that holds the caller's database connection (in a request, the
# thread all of that request's sync code runs on). So the write joins the
# transaction open on that connection, if there is one, and the task is
# indexed in Redis when it commits; with none, the write commits at once and
# the task is indexed before the call returns, as schedule() does in
# autocommit.


async def aschedule(
    fn_or_name: Any,
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    delay: float | datetime.timedelta | None = None,
    eta: datetime.datetime | None = None,
    expires: float | datetime.timedelta | datetime.datetime | None = None,
    queue: str | None = None,
    key: str | None = None,
    replace: bool = False,
    max_attempts: int | None = None,
    priority: int | None = None,
    meta: Mapping[str, Any] | None = None,
    using: str | None = None,
) -> DelayedTask:
    """:func:`~django_delayq.schedule`, from async code; the same arguments,
    errors and transaction semantics."""
    return await sync_to_async(schedule, thread_sensitive=True)(
        fn_or_name,
        args=args,
        kwargs=kwargs,
        delay=delay,
        eta=eta,
        expires=expires,
        queue=queue,
        key=key,
        replace=replace,
        max_attempts=max_attempts,
        priority=priority,
        meta=meta,
        using=using,
    )


async def aschedule_many(
    calls: Iterable[Call], *, using: str | None = None
) -> list[DelayedTask]:
    """:func:`~django_delayq.schedule_many`, from async code.

    ``calls`` is read on the connection's thread, with the rest: pass a list
    (or any iterable that thread may consume), not an async iterator.
    """
    return await sync_to_async(schedule_many, thread_sensitive=True)(calls, using=using)
