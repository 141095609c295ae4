"""How django-delayq workers run the tasks of
:class:`~django_delayq.backends.DelayQueueBackend`.

A row written by :meth:`DelayQueueBackend.enqueue
<django_delayq.backends.DelayQueueBackend.enqueue>` is named by its task's
``module_path``. Here:

- :func:`resolve`, a registry fallback, turns such a name back into a
  :class:`FrameworkTask` the worker can run, for a name that imports as a
  ``django.tasks`` task declared on a ``DelayQueueBackend`` alias, and for
  nothing else; the only modules it may import are installed apps' ``tasks``
  modules (others must be imported already);
- the function it runs calls the task, handing a ``takes_context`` task its
  ``TaskContext``, and stores the return value as JSON;
- a row is read back as the framework's ``TaskResult``, its errors included;
- the framework's ``task_started`` and ``task_finished`` signals are sent
  from django-delayq's own.

:func:`install` connects all of it, from ``AppConfig.ready()``.
"""

from __future__ import annotations

import builtins
import datetime
import functools
import json
import logging
import re
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from django.apps import apps
from django.dispatch import Signal
from django.utils import timezone
from django.utils.module_loading import import_string

from . import _tasks_compat, registry, signals
from .conf import get_settings
from .exceptions import TaskNotRegistered
from .payload import check_value, encode_json

_tasks_compat.require()

from ._tasks_compat import (  # noqa: E402
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)
from .backends import AttemptAborted, DelayQueueBackend, TaskCancelled  # noqa: E402

if TYPE_CHECKING:
    # Not at run time: @task may build the backend while apps still load.
    from .models import DelayedTask

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

#: In ``TaskResult.worker_ids``, for attempts of rows written before
#: django-delayq recorded which worker claimed each attempt.
UNRECORDED_WORKER = "unrecorded"

_STATUSES = {
    "scheduled": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    # The framework has no cancelled status: the task will never run, which
    # is what FAILED ("unable to start") means; errors say why.
    "cancelled": TaskResultStatus.FAILED,
}
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


# -- finding tasks by name (the registry fallback) ------------------------------


class FrameworkTask(registry.Task[..., Any]):
    """A ``django.tasks`` task, as the registry hands it to a worker."""

    def __init__(self, django_task: Task[..., Any], backend: DelayQueueBackend) -> None:
        super().__init__(
            _runner(django_task),
            django_task.module_path,
            queue=django_task.queue_name,
            max_attempts=backend.max_attempts,
            atomic=backend.atomic,
        )
        self.django_task = django_task
        self.backend = backend
        _connect_signals()


def resolve(name: str) -> FrameworkTask | None:
    """Return the task stored under ``name`` if it is ours to run, else None."""
    try:
        found, reason = _lookup(name)
    except Exception:  # a registry fallback must not raise
        logger.exception("django-delayq: looking up task %r failed", name)
        return None
    if found is None:
        logger.debug("%r is not a DelayQueueBackend task: %s", name, reason)
        return None
    backend = task_backends[found.backend]
    assert isinstance(backend, DelayQueueBackend)
    return FrameworkTask(found, backend)


def _lookup(path: str) -> tuple[Task[..., Any] | None, str]:
    """Import ``path`` if it may be a task of ours; the task, or why not."""
    if not _DOTTED.match(path):
        return None, "not a dotted path"
    if not apps.apps_ready:
        return None, "the apps are not loaded yet"
    # Cheap refusals first, so a forged name imports nothing: a backend of
    # ours must be configured, and only installed apps' modules are imported.
    aliases = task_backends.settings
    if not any(isinstance(_backend(alias), DelayQueueBackend) for alias in aliases):
        return None, "no TASKS backend is a DelayQueueBackend"
    module = path.rpartition(".")[0]
    app = apps.get_containing_app_config(module)
    if app is None:
        return None, (
            f"module {module!r} is not in an installed app; workers import "
            f"django.tasks tasks from INSTALLED_APPS only."
        )
    # Importing runs a module's code, so a name from a row (which anyone
    # who can write to the table or the stream can forge) imports nothing
    # but an app's tasks module or package; any other module must have been
    # imported already, by the worker's start-up or by a tasks module.
    if module not in sys.modules and not _in_tasks_package(module, app.name):
        return None, (
            f"module {module!r} has not been imported in this worker, which "
            f"imports only the tasks modules of installed apps ({app.name}.tasks "
            f"and below); import it from there or from the app's "
            f"AppConfig.ready()."
        )
    try:
        found = import_string(path)
    except Exception as exc:  # any error of the module is "not a task"
        return None, f"importing it failed ({type(exc).__name__}: {exc})."
    if not isinstance(found, Task) or found.module_path != path:
        return None, (
            "it does not import as the @task it names; keep the decorated "
            "task under the function's own name, at module level."
        )
    if not isinstance(_backend(found.backend), DelayQueueBackend):
        return None, (
            f"it is declared for backend {found.backend!r}, which is not a "
            f"DelayQueueBackend in settings.TASKS."
        )
    return found, ""


def _in_tasks_package(module: str, app: str) -> bool:
    return module == f"{app}.tasks" or module.startswith(f"{app}.tasks.")


def _backend(alias: str) -> BaseTaskBackend | None:
    try:
        return task_backends[alias]
    except Exception:  # an alias or BACKEND of someone else's that is broken
        return None


def _framework_task(name: str) -> FrameworkTask | None:
    """The registry's answer for ``name``, if it is one of ours."""
    try:
        found = registry.get(name)
    except TaskNotRegistered:
        return None
    return found if isinstance(found, FrameworkTask) else None


# -- running -----------------------------------------------------------------------

#: The row a worker thread is about to run, set by the ``task_started``
#: receiver just before the function is called, for ``TaskContext``.
_current = threading.local()


def _runner(django_task: Task[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        row, _current.row = getattr(_current, "row", None), None
        if not django_task.takes_context:
            value = django_task.call(*args, **kwargs)
        else:
            if row is None or row.name != django_task.module_path:
                from .models import DelayedTask

                # Called outside a worker: a first attempt, of no row.
                row = DelayedTask(
                    name=django_task.module_path,
                    args=list(args),
                    kwargs=kwargs,
                    run_at=timezone.now(),
                    status="running",
                    attempts=1,
                )
            running = _result_of(row, _task_of(row, django_task), django_task.backend)
            value = django_task.call(TaskContext(task_result=running), *args, **kwargs)
        return _as_stored(value)

    functools.update_wrapper(run, django_task.func)
    return run


def _as_stored(value: Any) -> Any:
    """A task's return value as the framework's backends keep it: its
    ``normalize_json()`` (a type it does not know fails the attempt with a
    ``TypeError``, as there), then what a JSON round trip gives (integer
    keys become strings). A value no JSON store can hold (NaN, infinity)
    fails the attempt with an error that says so, rather than succeeding
    with the value lost; so does one over ``MAX_RESULT_BYTES`` of JSON."""
    return check_value(
        json.loads(encode_json(normalize_json(value))),
        "the return value",
        max_bytes=get_settings().max_result_bytes,
    )


# -- results -----------------------------------------------------------------------


def _result_of(
    row: DelayedTask, django_task: Task[P, R], alias: str
) -> TaskResult[P, R]:
    result = TaskResult(
        task=django_task,
        id=str(row.pk),
        status=_STATUSES[row.status],
        enqueued_at=row.created_at,
        # A row keeps the start of its latest attempt only.
        started_at=row.started_at,
        finished_at=row.finished_at,
        last_attempted_at=row.started_at,
        args=row.args,
        kwargs=row.kwargs,
        backend=alias,
        errors=_errors(row),
        worker_ids=_worker_ids(row),
    )
    if row.status == "succeeded":
        object.__setattr__(result, "_return_value", row.result)
    return result


def _worker_ids(row: DelayedTask) -> list[str]:
    """The worker thread that claimed each attempt; rows written before
    django-delayq recorded them say ``"unrecorded"`` for those attempts."""
    recorded = [str(worker) for worker in row.worker_ids or []]
    return [UNRECORDED_WORKER] * max(row.attempts - len(recorded), 0) + recorded


def _row_result(row: DelayedTask, found: FrameworkTask) -> TaskResult[..., Any]:
    return _result_of(row, _task_of(row, found.django_task), found.backend.alias)


def _task_of(row: DelayedTask, django_task: Task[..., Any]) -> Task[..., Any]:
    """The task as it was enqueued: its queue, and ``run_after`` if deferred."""
    deferred = row.run_at - row.created_at > datetime.timedelta(milliseconds=1)
    try:
        return django_task.using(
            queue_name=row.queue, run_after=row.run_at if deferred else None
        )
    except InvalidTask:  # settings changed since; the declared task will do
        return django_task


def _errors(row: DelayedTask) -> list[TaskError]:
    """The row's last error (it keeps no earlier ones), and a cancellation."""
    errors = []
    if row.last_error and row.last_traceback:
        path = _exception_path(row.last_error, row.last_traceback)
        errors.append(
            TaskError(exception_class_path=path, traceback=row.last_traceback)
        )
    elif row.last_error:
        errors.append(_synthetic(AttemptAborted, row.last_error))
    if row.status == "cancelled":
        errors.append(_synthetic(TaskCancelled, "cancelled before it ran"))
    return errors


def _synthetic(exception: type[BaseException], message: str) -> TaskError:
    path = f"{exception.__module__}.{exception.__qualname__}"
    return TaskError(exception_class_path=path, traceback=f"{path}: {message}\n")


def _exception_path(error: str, trace: str) -> str:
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


def _send(
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


def _on_started(sender: object, task: DelayedTask, **kwargs: Any) -> None:
    found = _framework_task(task.name)
    if found is not None:
        _current.row = task  # for the TaskContext of the call that follows
        _send(task_started, found.backend, _row_result(task, found))


def _on_finished(sender: object, task: DelayedTask, **kwargs: Any) -> None:
    found = _framework_task(task.name)
    if found is not None:
        _send(task_finished, found.backend, _row_result(task, found))


def install() -> None:
    """Let workers run this backend's tasks; from ``AppConfig.ready()``, no I/O."""
    registry.add_fallback(resolve)


def _connect_signals() -> None:
    """Relay our signals to the framework's, from the first framework task on.

    Not from ``install()``: a receiver makes every task of every worker send
    its signals, and a project that runs no framework task should not pay
    for that.
    """
    uid = "django_delayq.tasks_bridge"
    signals.task_started.connect(_on_started, dispatch_uid=f"{uid}.started")
    # A retried attempt is not the end of the task: no task_finished for it.
    signals.task_succeeded.connect(_on_finished, dispatch_uid=f"{uid}.succeeded")
    signals.task_failed.connect(_on_finished, dispatch_uid=f"{uid}.failed")
