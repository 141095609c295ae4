"""What running a task's function takes, for either path: the one-row path
(:mod:`.execution`) and the group (:mod:`.group_commit`).

The function is called through ``DELAYQ["MIDDLEWARE"]`` (:func:`run_attempt`),
code of the project's around every run, written as Django's middleware
are: a class built once per process with the next step of the chain,
called for each run with a :class:`TaskRun`, returning what the next step
returns. The first entry of the setting is the outermost. The chain runs
where the function runs, inside the attempt's transaction (for an
``atomic`` task) and under its time limit; what a middleware raises, or
lets through from the function, is the attempt's outcome: it fails that
run, never the worker.

Which rows a function must not be called for (:func:`refusal`), what a
function may raise that fails only its attempt (:data:`FAILURES`), its time
limit, the error text recorded, the return value as stored, and the fence
(:class:`Fenced`) that rolls an attempt back when another worker took it
over.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.utils.module_loading import import_string

from .. import registry
from ..conf import get_settings
from ..exceptions import (
    InvalidConfiguration,
    InvalidPayload,
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
FAILURES = (Exception, SystemExit, KeyboardInterrupt, TimeLimitExceeded)


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
    """One run of a task, as middleware sees it."""

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
    #: the registered task (its options: ``task.time_limit``, ...)
    task: registry.Task[Any, Any]
    _call: Callable[[], Any] = field(repr=False, compare=False)


#: A step of the chain: a run in, the function's value out.
Handler = Callable[[TaskRun], Any]


def _innermost(run: TaskRun) -> Any:
    return run._call()


_lock = threading.Lock()
#: (the setting's paths, the chain built from them)
_built: tuple[tuple[str, ...], Handler] = ((), _innermost)


def load(paths: Sequence[str]) -> Handler:
    """The chain of the middleware at ``paths``, outermost first; raise
    :class:`~django_delayq.exceptions.InvalidConfiguration` naming an entry
    that cannot be imported or built."""
    handler: Handler = _innermost
    for path in reversed(paths):
        where = f'DELAYQ["MIDDLEWARE"] entry {path!r}'
        try:
            factory = import_string(path)
        except ImportError as exc:
            raise InvalidConfiguration(
                f"{where} cannot be imported ({exc}); give the dotted path of "
                f"a middleware class, such as 'shop.tasks.TenantMiddleware'."
            ) from None
        try:
            handler = factory(handler)
        except Exception as exc:
            raise InvalidConfiguration(
                f"{where} could not be built with the next step of the chain "
                f"({type(exc).__name__}: {exc}); its __init__ takes one argument, "
                f"as a Django middleware's does."
            ) from None
        if not callable(handler):
            raise InvalidConfiguration(
                f"{where} built an object that cannot be called; give it a "
                f"__call__(self, run) method."
            )
    return handler


def chain() -> Handler:
    """This process's chain, built again when the setting changes."""
    global _built
    paths = get_settings().middleware
    built = _built
    if built[0] != paths:
        with _lock:
            if _built[0] != paths:
                _built = (paths, load(paths))
            built = _built
    return built[1]


def run_attempt(
    registered: registry.Task[Any, Any], row: DelayedTask, limit: float | None
) -> Any:
    """Call ``registered``'s function for an attempt of ``row`` through the
    middleware (without any, the function alone), with :func:`current_run`
    saying which run it is meanwhile."""
    handler = chain()
    # What makes the run, not the run: most projects have no middleware,
    # and a line logged during the run builds it only if it asks.
    token = _current.set((registered, row, limit))
    try:
        if handler is _innermost:
            return registered.run_attempt(row, limit)
        return handler(_run_of(registered, row, limit))
    finally:
        _current.reset(token)


def _run_of(
    registered: registry.Task[Any, Any], row: DelayedTask, limit: float | None
) -> TaskRun:
    return TaskRun(
        id=row.pk,
        name=row.name,
        queue=row.queue,
        attempt=row.attempts,
        max_attempts=row.max_attempts,
        args=row.args,
        kwargs=row.kwargs,
        task=registered,
        _call=lambda: registered.run_attempt(row, limit),
    )


#: What makes the run under way in this thread (a worker thread runs one at
#: a time): the task, its row and its time limit.
_current: contextvars.ContextVar[
    tuple[registry.Task[Any, Any], DelayedTask, float | None] | None
] = contextvars.ContextVar("delayq_current_run", default=None)


def current_run() -> TaskRun | None:
    """The run of a task under way here, from its function, its middleware
    or any code they call (a log filter); None outside a run."""
    current = _current.get()
    return None if current is None else _run_of(*current)
