"""What running a task's function takes, for either path: the one-row path
(:mod:`.execution`) and the group (:mod:`.group_commit`).

Which rows a function must not be called for (:func:`refusal`), what a
function may raise that fails only its attempt (:data:`FAILURES`), its time
limit, the error text recorded, the return value as stored, and the fence
(:class:`Fenced`) that rolls an attempt back when another worker took it
over.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from .. import registry
from ..conf import get_settings
from ..exceptions import InvalidPayload, TaskRefused, TimeLimitExceeded
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
    return fail(row, row.attempts, error, trace, expect=Status.RUNNING)


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
