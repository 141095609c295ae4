"""A Django Tasks backend: ``django.tasks`` tasks, run by django-delayq.

``TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQueueBackend"}}``

:meth:`DelayQueueBackend.enqueue` writes the same
:class:`~django_delayq.models.DelayedTask` row as :func:`~django_delayq.schedule`,
through it, in the caller's transaction; the row's ``name`` is the task's
``module_path``. Workers look names up in the registry only: :func:`resolve`,
a registry fallback, answers for a name that imports (from an installed app)
as a ``django.tasks`` task declared on a ``DelayQueueBackend`` alias, and
for nothing else. Results are read back from the row, from any process.
"""

from __future__ import annotations

import builtins
import datetime
import difflib
import functools
import logging
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from django.apps import apps
from django.core import checks
from django.db import router, transaction
from django.dispatch import Signal
from django.utils import timezone
from django.utils.module_loading import import_string

from . import _tasks_compat, conf, registry, signals
from .exceptions import DelayQueueException, InvalidConfiguration, TaskNotRegistered

_tasks_compat.require()

from ._tasks_compat import (  # noqa: E402
    DEFAULT_TASK_QUEUE_NAME,
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)

if TYPE_CHECKING:
    # Not at run time: @task may build this backend while apps still load.
    from .models import DelayedTask

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

#: The value of ``TASKS[alias]["BACKEND"]``.
BACKEND_PATH = "django_delayq.backends.DelayQueueBackend"
#: ``OPTIONS`` the backend understands, with their defaults.
OPTIONS: dict[str, Any] = {"max_attempts": None, "atomic": True}
#: django-delayq counts attempts but does not record who ran them.
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


class TaskCancelled(DelayQueueException):
    """The error of a task cancelled before it ran."""


class AttemptAborted(DelayQueueException):
    """The error of an attempt that ended outside the task's own code: its
    worker was lost, or did not know the task."""


class DelayQueueBackend(BaseTaskBackend):
    """Enqueue ``django.tasks`` tasks as django-delayq task rows.

    ``QUEUES`` name django-delayq queues (``default`` and the keys of
    ``DELAYQ["QUEUES"]``). ``OPTIONS``: ``max_attempts`` (default
    ``DELAYQ["MAX_ATTEMPTS"]``) and ``atomic`` (default ``True``), as for
    ``@django_delayq.task``. Tasks run in due order, so priorities are refused.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        # Never raises: check() reports the problems, enqueue() refuses.
        queues = params.get("QUEUES", [DEFAULT_TASK_QUEUE_NAME])
        self._problems = _queue_list_problems(alias, queues)
        if self._problems:
            params = {**params, "QUEUES": []}
        super().__init__(alias, params)
        self._problems += _option_problems(alias, self.options)
        # Workers fall back to the defaults rather than use a bad value.
        valid = {} if self._problems else self.options
        self.max_attempts: int | None = valid.get("max_attempts")
        self.atomic: bool = valid.get("atomic", True)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        return [
            checks.Error(problem.msg, hint=problem.hint, id=problem.id)
            for problem in [*self._problems, *self._queue_problems()]
        ]

    def enqueue(
        self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[P, R]:
        """Write the task's row in the current transaction; return its result.

        ``task_enqueued`` is sent once the transaction commits.
        """
        if self._problems:
            first = self._problems[0]
            raise InvalidTaskBackend(f"{first.msg} {first.hint} ({first.id})")
        self.validate_task(task)
        self._check_declared(task)
        from . import api
        from .models import DelayedTask

        row = api.schedule(
            task.module_path,
            args=args,
            kwargs=kwargs,
            eta=task.run_after,
            queue=task.queue_name,
            max_attempts=self.max_attempts,
        )
        result = _result_of(row, task, self.alias)
        transaction.on_commit(
            functools.partial(_send, task_enqueued, self, result),
            using=router.db_for_write(DelayedTask),
        )
        return result

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """Read the result from the task's row (primary database)."""
        from .models import DelayedTask

        try:
            task_id = uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        db = router.db_for_write(DelayedTask)
        row = DelayedTask.objects.using(db).filter(pk=task_id).first()
        found = None if row is None else _framework_task(row.name)
        if row is None or found is None:
            raise TaskResultDoesNotExist(result_id)
        return _row_result(row, found)

    def _check_declared(self, task: Task[..., Any]) -> None:
        """Refuse a task that a worker could not find again by its path."""
        path = task.module_path
        if len(path) > registry.MAX_NAME_LENGTH:
            raise InvalidTask(
                f"{path!r} is longer than {registry.MAX_NAME_LENGTH} characters, "
                f"the most a task row's name holds; shorten the module or "
                f"function name."
            )
        declared, reason = _lookup(path)
        if declared is None:
            raise InvalidTask(f"Cannot enqueue {path!r}: {reason}")
        if declared.func is not task.func:
            raise InvalidTask(
                f"Cannot enqueue {path!r}: it imports as another task than "
                f"this one; keep one @task per function, at module level."
            )
        if declared.backend != self.alias:
            raise InvalidTask(
                f"Cannot enqueue {path!r} on backend {self.alias!r}: workers "
                f"run it as declared, on backend {declared.backend!r}. Change "
                f"@task(backend=...) instead of using(backend=...)."
            )

    def _queue_problems(self) -> list[conf.Problem]:
        try:
            settings = conf.parse(conf.raw_settings())
        except InvalidConfiguration:
            return []  # the DELAYQ checks report it
        where = f'TASKS["{self.alias}"]["QUEUES"]'
        return [
            conf.Problem(
                "delayq.E010",
                f"{where} names {name!r}, which is not a django-delayq queue.",
                f'Add it to DELAYQ["QUEUES"] (e.g. "QUEUES": {{{name!r}: {{}}}}), '
                f"or remove it from {where}.",
            )
            for name in sorted(self.queues)
            if name not in settings.queues
        ]


def _queue_list_problems(alias: str, queues: object) -> list[conf.Problem]:
    if isinstance(queues, list | tuple | set | frozenset) and all(
        isinstance(name, str) for name in queues
    ):
        return []
    return [
        conf.Problem(
            "delayq.E010",
            f'TASKS["{alias}"]["QUEUES"] must be a list of queue names; '
            f"got {queues!r}.",
            'For example "QUEUES": ["default", "orders"], naming queues of '
            'DELAYQ["QUEUES"].',
        )
    ]


def _option_problems(alias: str, options: object) -> list[conf.Problem]:
    where = f'TASKS["{alias}"]["OPTIONS"]'
    if not isinstance(options, Mapping):
        return [
            conf.Problem(
                "delayq.E009",
                f"{where} must be a dict, not {type(options).__name__}.",
                'For example "OPTIONS": {"max_attempts": 5, "atomic": True}.',
            )
        ]
    problems = []
    for key in options:
        if key not in OPTIONS:
            close = difflib.get_close_matches(str(key), OPTIONS, n=1)
            problems.append(
                conf.Problem(
                    "delayq.E009",
                    f"{where} has an unknown option {key!r}.",
                    f"Did you mean {close[0]!r}?"
                    if close
                    else f"Known options: {', '.join(OPTIONS)}.",
                )
            )
    max_attempts = options.get("max_attempts")
    if max_attempts is not None:
        try:
            registry.validate_max_attempts(
                max_attempts, where=f'{where}["max_attempts"]'
            )
        except ValueError as exc:
            problems.append(
                conf.Problem(
                    "delayq.E009",
                    str(exc),
                    'Remove it to use DELAYQ["MAX_ATTEMPTS"].',
                )
            )
    if not isinstance(options.get("atomic", True), bool):
        problems.append(
            conf.Problem(
                "delayq.E009",
                f'{where}["atomic"] must be True or False; got {options["atomic"]!r}.',
                "Use True (the default: the task and the record of its "
                "success commit together) or False.",
            )
        )
    return problems


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
    if apps.get_containing_app_config(module) is None:
        return None, (
            f"module {module!r} is not in an installed app; workers import "
            f"django.tasks tasks from INSTALLED_APPS only."
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
        # Stored as JSON, as the framework's own backends do; a value that
        # is not JSON fails the attempt (TypeError), as it does there.
        return normalize_json(value)

    functools.update_wrapper(run, django_task.func)
    return run


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
        worker_ids=[UNRECORDED_WORKER] * row.attempts,
    )
    if row.status == "succeeded":
        object.__setattr__(result, "_return_value", row.result)
    return result


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
    uid = "django_delayq.backends"
    signals.task_started.connect(_on_started, dispatch_uid=f"{uid}.started")
    # A retried attempt is not the end of the task: no task_finished for it.
    signals.task_succeeded.connect(_on_finished, dispatch_uid=f"{uid}.succeeded")
    signals.task_failed.connect(_on_finished, dispatch_uid=f"{uid}.failed")
