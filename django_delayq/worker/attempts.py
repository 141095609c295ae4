"""What running a task's function takes, for either path: the one-row path
(:mod:`.execution`) and the group (:mod:`.group_commit`).

The function is called through ``DELAYQ["MIDDLEWARE"]`` (:func:`run_attempt`),
code of the project's around every run, written as Django's middleware
are: a class built once per process with the next step of the chain (by
:mod:`django_delayq.conf.middleware`), called for each run with a
:class:`TaskRun`, returning what the next step returns. The first entry of
the setting is the outermost. The chain runs where the function runs,
inside the attempt's transaction (for an ``atomic`` task) and under its
time limit; what a middleware raises, or lets through from the function,
is the attempt's outcome: it fails that run, never the worker.

Which rows a function is not called for (:func:`expired`, whose task is
cancelled, and :func:`refusal`, whose task fails), what a
function may raise that fails only its attempt (:data:`FAILURES`), its time
limit, the error text recorded, the return value as stored, and the fence
(:class:`Fenced`) that rolls an attempt back when another worker took it
over.
"""

from __future__ import annotations

import contextvars
import datetime
import logging
import threading
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .. import registry, tracing
from ..conf import get_settings
from ..conf.middleware import get_middleware, innermost
from ..exceptions import (
    InvalidPayload,
    TaskCancelled,
    TaskRefused,
    TimeLimitExceeded,
)
from ..models import DelayedTask, Status
from ..outcomes import fail
from ..payload import check_value
from .time_limits import time_limit_error

# The one-row path's logger: its lines keep the name logging settings and
# alerts already match.
logger = logging.getLogger("django_delayq.worker.execution")


class Fenced(Exception):
    """The row moved on under us: roll back and record nothing."""


#: What a task's function may raise that fails its attempt (and no more):
#: task code calling sys.exit() must not end a worker thread.
FAILURES = (
    Exception,
    SystemExit,
    KeyboardInterrupt,
    TimeLimitExceeded,
    TaskCancelled,
)


def expired(row: DelayedTask, now: datetime.datetime) -> bool:
    """Whether the task of a claimed row has expired by ``now`` (its
    ``expires_at``): its function must not be called, and the task is
    cancelled (:func:`django_delayq.outcomes.expire`). Judged just before
    the call, by this worker's clock, as "never early" is."""
    return row.expires_at is not None and now >= row.expires_at


def refusal(row: DelayedTask, registered: registry.Task[Any, Any]) -> Exception | None:
    """Why the function must not be called for this row at all: its stored
    arguments do not fit it (a row scheduled before the function's signature
    changed), or the task refuses such a row (the task of a periodic
    schedule's setting, asked to run outside its ticks); None if it may run.
    """
    problem = registered.row_problem(row.args, row.kwargs, row.key)
    if problem is not None:
        return TaskRefused(f"{row.name}: not called: {problem}.")
    problem = registered.argument_problem(row.args, row.kwargs)
    if problem is not None:
        return TypeError(
            f"{row.name}: not called, its stored arguments do not fit it: "
            f"{problem}. Schedule it again with arguments that fit."
        )
    return None


def refuse(row: DelayedTask, exc: Exception) -> bool:
    """Fail a task for :func:`refusal`'s reason without calling its function;
    False if the attempt was fenced.

    Every attempt would be refused the same way: retrying only delays the
    failure. A ``TypeError`` raised inside the function is an ordinary
    failure.
    """
    error = f"{type(exc).__name__}: {exc}"
    trace = "".join(traceback.format_exception_only(exc))
    return fail(row, row.attempts, error, trace, expect=Status.RUNNING, exc=exc)


def time_limit_of(registered: registry.Task[Any, Any]) -> float | None:
    """The task's time limit: its own, or ``DELAYQ["TIME_LIMIT"]``."""
    if registered.time_limit is not None:
        return registered.time_limit
    return get_settings().time_limit


def failure_text(exc: BaseException, limit: float | None) -> str | None:
    """The error to record for ``exc``, where the default would say too little."""
    if isinstance(exc, TimeLimitExceeded) and limit is not None:
        return time_limit_error(limit)
    return None


def stored_value(row: DelayedTask, result: Any) -> Any:
    """The return value as stored: JSON of at most ``MAX_RESULT_BYTES``;
    anything else is dropped, with a warning that says why."""
    try:
        return check_value(
            result, "the return value", max_bytes=get_settings().max_result_bytes
        )
    except InvalidPayload as exc:
        logger.warning(
            "task %s succeeded; its return value is not stored: %s", row.pk, exc
        )
        return None


def cancelled_meanwhile(row: DelayedTask, using: str) -> bool:
    """Whether a fenced attempt's row was cancelled while it ran (one read):
    its outcome is then rightly discarded, and its entry is done with."""
    cancelled = (
        DelayedTask.objects.using(using)
        .filter(pk=row.pk, status=Status.CANCELLED, attempts=row.attempts)
        .exists()
    )
    if cancelled:
        logger.info(
            "task %s: attempt %d ended after the task was cancelled; its "
            "outcome was discarded",
            row.pk,
            row.attempts,
        )
    return cancelled


def log_fenced(row: DelayedTask) -> None:
    logger.warning(
        "task %s: attempt %d finished after another worker took it over; "
        "its completion was discarded",
        row.pk,
        row.attempts,
    )


# -- DELAYQ["MIDDLEWARE"] ------------------------------------------------------


@dataclass(frozen=True)
class TaskRun:
    """One run of a task, as middleware and :func:`current_run` see it."""

    #: the task's id (its row's primary key)
    id: uuid.UUID
    #: the registered task's name
    name: str
    queue: str
    #: this attempt's number, from 1
    attempt: int
    max_attempts: int
    args: Sequence[Any]
    kwargs: dict[str, Any]
    #: the task's metadata (``schedule(..., meta=...)``), read-only; empty
    #: when it has none
    meta: Mapping[str, Any]
    #: the registered task (its options: ``task.time_limit``, ...)
    task: registry.Task[Any, Any]
    _call: Callable[[], Any] = field(repr=False, compare=False)
    _cancelled: threading.Event | None = field(default=None, repr=False, compare=False)

    @property
    def cancelled(self) -> bool:
        """Whether the task was cancelled while this run goes on
        (:func:`~django_delayq.cancel`): the run should stop, and whatever
        it returns is not recorded. Seen by the worker within about a
        second of the cancel's commit."""
        return self._cancelled is not None and self._cancelled.is_set()


#: A step of the chain: a run in, the function's value out.
Handler = Callable[[TaskRun], Any]


def run_attempt(
    registered: registry.Task[Any, Any],
    row: DelayedTask,
    limit: float | None,
    cancelled: threading.Event | None = None,
) -> Any:
    """Call ``registered``'s function for an attempt of ``row`` through the
    middleware (without any, the function alone), with :func:`current_run`
    saying which run it is meanwhile; ``cancelled`` is set if the task is
    cancelled while it runs (see :mod:`.time_limits`)."""
    handler = get_middleware().handler
    # What makes the run, not the run: most projects have no middleware,
    # and a line logged during the run builds it only if it asks.
    token = _current.set((registered, row, limit, cancelled))
    try:
        if tracing.ENABLED and tracing.recording():
            with tracing.processing(row):
                if handler is innermost:
                    return registered.run_attempt(row, limit)
                return handler(_run_of(registered, row, limit, cancelled))
        if handler is innermost:
            return registered.run_attempt(row, limit)
        return handler(_run_of(registered, row, limit, cancelled))
    finally:
        _current.reset(token)


def _run_of(
    registered: registry.Task[Any, Any],
    row: DelayedTask,
    limit: float | None,
    cancelled: threading.Event | None = None,
) -> TaskRun:
    return TaskRun(
        id=row.pk,
        name=row.name,
        queue=row.queue,
        attempt=row.attempts,
        max_attempts=row.max_attempts,
        args=row.args,
        kwargs=row.kwargs,
        meta=_NO_META if not row.meta else MappingProxyType(row.meta),
        task=registered,
        _call=lambda: registered.run_attempt(row, limit),
        _cancelled=cancelled,
    )


#: The metadata of a task that has none.
_NO_META: Mapping[str, Any] = MappingProxyType({})

#: What makes the run under way in this thread (a worker thread runs one at
#: a time): the task, its row, its time limit and the flag of its cancel.
_current: contextvars.ContextVar[
    tuple[registry.Task[Any, Any], DelayedTask, float | None, threading.Event | None]
    | None
] = contextvars.ContextVar("delayq_current_run", default=None)


def current_run() -> TaskRun | None:
    """The run of a task under way here, from its function, its middleware
    or any code they call (a log filter); None outside a run."""
    current = _current.get()
    return None if current is None else _run_of(*current)


def raise_if_cancelled() -> None:
    """Raise :class:`~django_delayq.exceptions.TaskCancelled` if the task
    whose run is under way here was cancelled meanwhile; do nothing
    otherwise, and outside a run.

    A checkpoint for a long task: call it between steps, and a cancel
    stops the task there, cleanly, instead of by force after
    ``DELAYQ["CANCEL_GRACE"]`` seconds.
    """
    current = _current.get()
    if current is not None and current[3] is not None and current[3].is_set():
        raise TaskCancelled(f"task {current[1].pk} was cancelled while running")
