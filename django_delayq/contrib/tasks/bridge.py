"""How django-delayq workers run the tasks of
:class:`~django_delayq.backends.DelayQueueBackend`.

A row written by :meth:`DelayQueueBackend.enqueue
<django_delayq.backends.DelayQueueBackend.enqueue>` is named by its task's
``module_path``. Here:

- :func:`resolve`, a registry fallback, turns such a name back into a
  :class:`FrameworkTask` the worker can run, for a name that
  :func:`~django_delayq.contrib.tasks.backend.lookup` finds, and for nothing else;
- the function it runs calls the task, handing a ``takes_context`` task its
  ``TaskContext``, and stores the return value as JSON;
- the framework's ``task_started`` and ``task_finished`` signals are sent
  from django-delayq's own, with the row read back as a ``TaskResult`` by
  :mod:`django_delayq.contrib.tasks.results`.

The modules of :mod:`django_delayq.contrib.tasks` import each other in one
direction only: ``compat``, ``results``, ``backend``, then this one.

:func:`install` connects all of it, from ``AppConfig.ready()``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from django.utils import timezone

from ... import registry, signals
from ...conf import get_settings
from ...exceptions import TaskNotRegistered
from ...payload import check_value, encode_json
from ...timing import resolve_run_at
from . import compat

compat.require()

from .backend import DelayQueueBackend, lookup  # noqa: E402
from .compat import (  # noqa: E402
    Task,
    TaskContext,
    TaskResult,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)
from .results import result_of, send, task_of  # noqa: E402

if TYPE_CHECKING:
    # Not at run time: @task may build the backend while apps still load.
    from ...models import DelayedTask

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


# -- finding tasks by name (the registry fallback) ------------------------------


class FrameworkTask(registry.Task[..., Any]):
    """A ``django.tasks`` task, as the registry hands it to a worker."""

    def __init__(self, django_task: Task[..., Any], backend: DelayQueueBackend) -> None:
        # The backend's options, under the task's own name and queue.
        options = dataclasses.replace(
            backend.task_options,
            name=django_task.module_path,
            queue=django_task.queue_name,
        )
        super().__init__(_runner(django_task), **options.arguments())
        self.django_task = django_task
        self.backend = backend
        _connect_signals()

    def read_signature(self) -> inspect.Signature:
        """The task function's, without the ``TaskContext`` the worker
        passes a ``takes_context`` task: not an argument of the caller's."""
        signature = super().read_signature()
        if not self.django_task.takes_context:
            return signature
        parameters = list(signature.parameters.values())[1:]
        return signature.replace(parameters=parameters)


def resolve(name: str) -> FrameworkTask | None:
    """Return the task stored under ``name`` if it is ours to run, else None."""
    try:
        found, reason = lookup(name)
    except Exception:  # a registry fallback must not raise
        logger.exception("django-delayq: looking up task %r failed", name)
        return None
    if found is None:
        logger.debug("%r is not a DelayQueueBackend task: %s", name, reason)
        return None
    backend = task_backends[found.backend]
    assert isinstance(backend, DelayQueueBackend)
    return FrameworkTask(found, backend)


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
                from ...models import DelayedTask

                # Called outside a worker: a first attempt, of no row, due
                # when it is made (not deferred).
                now = timezone.now()
                row = DelayedTask(
                    name=django_task.module_path,
                    args=list(args),
                    kwargs=kwargs,
                    created_at=now,
                    run_at=resolve_run_at(None, None, now=now),
                    status="running",
                    attempts=1,
                )
            running = result_of(row, task_of(row, django_task), django_task.backend)
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


def _row_result(row: DelayedTask, found: FrameworkTask) -> TaskResult[..., Any]:
    return result_of(row, task_of(row, found.django_task), found.backend.alias)


# -- signals -----------------------------------------------------------------------


def _on_started(sender: object, task: DelayedTask, **kwargs: Any) -> None:
    found = _framework_task(task.name)
    if found is not None:
        _current.row = task  # for the TaskContext of the call that follows
        send(task_started, found.backend, _row_result(task, found))


def _on_finished(sender: object, task: DelayedTask, **kwargs: Any) -> None:
    found = _framework_task(task.name)
    if found is not None:
        send(task_finished, found.backend, _row_result(task, found))


def install() -> None:
    """Let workers run this backend's tasks; from ``AppConfig.ready()``, no I/O."""
    registry.add_fallback(resolve)


def _connect_signals() -> None:
    """Relay our signals to the framework's, from the first framework task on.

    Not from ``install()``: a receiver makes every task of every worker send
    its signals, and a project that runs no framework task should not pay
    for that.
    """
    uid = "django_delayq.contrib.tasks.bridge"
    signals.task_started.connect(_on_started, dispatch_uid=f"{uid}.started")
    # A retried attempt is not the end of the task: no task_finished for it.
    signals.task_succeeded.connect(_on_finished, dispatch_uid=f"{uid}.succeeded")
    signals.task_failed.connect(_on_finished, dispatch_uid=f"{uid}.failed")
