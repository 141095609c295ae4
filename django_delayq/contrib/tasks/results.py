"""Django Tasks results read from task rows, and the framework's signals.

The layer under :mod:`django_delayq.backends` (which enqueues and reads
results) and :mod:`django_delayq.contrib.tasks.bridge` (which runs the tasks in
workers): both import it, it imports neither.
"""

from __future__ import annotations

import builtins
import logging
import re
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from django.dispatch import Signal

from ...exceptions import DelayQueueException
from ...timing import resolve_run_at
from . import compat

compat.require()

from .compat import (  # noqa: E402
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskError,
    TaskResult,
    TaskResultStatus,
)

if TYPE_CHECKING:
    from ...models import DelayedTask

logger = logging.getLogger("django_delayq.contrib.tasks.bridge")

P = ParamSpec("P")
R = TypeVar("R")


class TaskCancelled(DelayQueueException):
    """The error of a task cancelled before it ran."""


class AttemptAborted(DelayQueueException):
    """The error of an attempt that ended outside the task's own code: its
    worker was lost, or did not know the task."""


# Where the documentation and stored results have always named them (a
# result's exception_class_path): django_delayq.backends imports them.
TaskCancelled.__module__ = AttemptAborted.__module__ = "django_delayq.backends"

#: In ``TaskResult.worker_ids``, for attempts of rows written before
#: django-delayq recorded which worker claimed each attempt.
UNRECORDED_WORKER = "unrecorded"

STATUSES = {
    "scheduled": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    # The framework has no cancelled status: the task will never run, which
    # is what FAILED ("unable to start") means; errors say why.
    "cancelled": TaskResultStatus.FAILED,
}


# -- results -----------------------------------------------------------------------


def result_of(
    row: DelayedTask, django_task: Task[P, R], alias: str
) -> TaskResult[P, R]:
    result = TaskResult(
        task=django_task,
        id=str(row.pk),
        status=STATUSES[row.status],
        enqueued_at=row.created_at,
        # A row keeps the start of its latest attempt only.
        started_at=row.started_at,
        finished_at=row.finished_at,
        last_attempted_at=row.started_at,
        args=row.args,
        kwargs=row.kwargs,
        backend=alias,
        errors=errors_of(row),
        worker_ids=worker_ids_of(row),
    )
    if row.status == "succeeded":
        object.__setattr__(result, "_return_value", row.result)
    return result


def worker_ids_of(row: DelayedTask) -> list[str]:
    """The worker thread that claimed each attempt; rows written before
    django-delayq recorded them say ``"unrecorded"`` for those attempts."""
    recorded = [str(worker) for worker in row.worker_ids or []]
    return [UNRECORDED_WORKER] * max(row.attempts - len(recorded), 0) + recorded


def task_of(row: DelayedTask, django_task: Task[..., Any]) -> Task[..., Any]:
    """The task as it was enqueued: its queue, priority, and ``run_after``
    if deferred.

    A row keeps a ``run_after`` exactly, in the past too; a task enqueued
    without one is due when it was enqueued, as ``schedule()`` words it.
    """
    deferred = row.run_at != resolve_run_at(None, None, now=row.created_at)
    try:
        return django_task.using(
            queue_name=row.queue,
            priority=row.priority,
            run_after=row.run_at if deferred else None,
        )
    except InvalidTask:  # settings changed since; the declared task will do
        return django_task


def errors_of(row: DelayedTask) -> list[TaskError]:
    """The row's last error (it keeps no earlier ones), and a cancellation."""
    errors = []
    if row.last_error and row.last_traceback:
        path = exception_path(row.last_error, row.last_traceback)
        errors.append(
            TaskError(exception_class_path=path, traceback=row.last_traceback)
        )
    elif row.last_error:
        errors.append(synthetic(AttemptAborted, row.last_error))
    if row.status == "cancelled":
        errors.append(synthetic(TaskCancelled, "cancelled before it ran"))
    return errors


def synthetic(exception: type[BaseException], message: str) -> TaskError:
    path = f"{exception.__module__}.{exception.__qualname__}"
    return TaskError(exception_class_path=path, traceback=f"{path}: {message}\n")


def exception_path(error: str, trace: str) -> str:
    """The dotted path of the exception class, read back from its traceback.

    ``error`` starts with the class's ``__name__``; the traceback's line for
    the exception that was raised adds its module, except for builtins.
    """
    name = error.partition(":")[0].strip()
    if not name.isidentifier():
        return f"{AttemptAborted.__module__}.{AttemptAborted.__qualname__}"
    lines = re.findall(rf"^(?:\w+\.)*{re.escape(name)}(?=:|$)", trace, re.M)
    path = lines[-1] if lines else name
    if "." not in path and isinstance(getattr(builtins, path, None), type):
        return f"builtins.{path}"
    return path


# -- signals -----------------------------------------------------------------------


def send(
    signal: Signal, backend: BaseTaskBackend, result: TaskResult[..., Any]
) -> None:
    """Send a framework signal; a receiver's error is logged, never raised."""
    for receiver, response in signal.send_robust(type(backend), task_result=result):
        if isinstance(response, Exception):
            logger.error(
                "django-delayq: signal receiver %r raised for task %s",
                receiver,
                result.id,
                exc_info=response,
            )
