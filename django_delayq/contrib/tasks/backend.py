"""A Django Tasks backend: ``django.tasks`` tasks, run by django-delayq.

``TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQueueBackend"}}``

:meth:`DelayQueueBackend.enqueue` writes the same
:class:`~django_delayq.models.DelayedTask` row as :func:`~django_delayq.schedule`,
through it, in the caller's transaction; the row's ``name`` is the task's
``module_path``. Results are read back from the row, from any process. This
module holds the backend (configured as
``django_delayq.backends.DelayQueueBackend``), the validation of its
``QUEUES`` and ``OPTIONS``, the errors it reports and :func:`lookup`, which
decides which task names are its own (for ``enqueue()`` and for workers
alike); rows become results in :mod:`django_delayq.contrib.tasks.results`,
and how workers run these tasks is :mod:`django_delayq.contrib.tasks.bridge`.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import sys
import uuid
from collections.abc import Mapping
from typing import Any, ParamSpec, TypeVar

from django.apps import apps
from django.core import checks
from django.db import transaction
from django.utils.module_loading import import_string

from ... import conf, registry
from ...checks import ids as check_ids
from ...exceptions import InvalidConfiguration
from ...options import TaskOptions, task_option_problem
from . import compat

compat.require()

from ...payload import encode_json  # noqa: E402
from .compat import (  # noqa: E402
    DEFAULT_TASK_QUEUE_NAME,
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    task_backends,
    task_enqueued,
)
from .results import (  # noqa: E402
    AttemptAborted,
    TaskCancelled,
    result_of,
    send,
    task_of,
)

__all__ = ["AttemptAborted", "DelayQueueBackend", "TaskCancelled", "lookup"]

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")

P = ParamSpec("P")
R = TypeVar("R")

#: The value of ``TASKS[alias]["BACKEND"]``.
BACKEND_PATH = "django_delayq.backends.DelayQueueBackend"
#: The ``OPTIONS`` the backend understands, task options as ``@task`` takes
#: them, and how to fix a bad value of each.
_OPTION_HINTS = {
    "max_attempts": 'Remove it to use DELAYQ["MAX_ATTEMPTS"].',
    "atomic": "Use True (the default: the task and the record of its "
    "success commit together) or False.",
}
#: ``OPTIONS`` the backend understands, with their defaults.
OPTIONS: dict[str, Any] = {
    option: getattr(TaskOptions(), option) for option in _OPTION_HINTS
}


def _as_django_stores(value: Any) -> Any:
    """What Django's own backends keep of ``args`` or ``kwargs``: its
    ``normalize_json()`` (bytes become UTF-8 text, tuples lists), then what a
    JSON round trip gives (integer keys become strings). A value it refuses
    is passed on as it is, so that ``schedule()`` names the place and the
    fix (as a ``TypeError`` too, like Django's backends)."""
    try:
        return json.loads(encode_json(normalize_json(value)))
    except (TypeError, ValueError, RecursionError):
        return value


class DelayQueueBackend(BaseTaskBackend):
    """Enqueue ``django.tasks`` tasks as django-delayq task rows.

    ``QUEUES`` name django-delayq queues (``default`` and the keys of
    ``DELAYQ["QUEUES"]``). ``OPTIONS``: ``max_attempts`` (default
    ``DELAYQ["MAX_ATTEMPTS"]``) and ``atomic`` (default ``True``), as for
    ``@django_delayq.task``. A task's ``priority`` (-100 to 100) picks its
    band: among due tasks, high (above 0) starts before normal (0), before
    low (below 0).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        # Never raises: check() reports the problems, enqueue() refuses.
        queues = params.get("QUEUES", [DEFAULT_TASK_QUEUE_NAME])
        self._problems = _queue_list_problems(alias, queues)
        if self._problems:
            params = {**params, "QUEUES": []}
        super().__init__(alias, params)
        self._problems += _option_problems(alias, self.options)
        # Workers fall back to the defaults rather than use a bad value.
        #: the options of this backend's tasks (their name and queue are
        #: each task's own)
        self.task_options = TaskOptions(**({} if self._problems else self.options))

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
        from ... import api
        from ...models import write_db

        # An argument JSON cannot hold raises UnsupportedPayloadType, a
        # TypeError naming the place and the fix, then with the words of
        # Django's backends ("(Unsupported type: <class '...'>)").
        row = api.schedule(
            task.module_path,
            args=_as_django_stores(args),
            kwargs=_as_django_stores(kwargs),
            eta=task.run_after,
            queue=task.queue_name,
            max_attempts=self.task_options.max_attempts,
            priority=task.priority,
        )
        result = result_of(row, task, self.alias)
        transaction.on_commit(
            functools.partial(send, task_enqueued, self, result),
            using=write_db(),
        )
        return result

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """Read the result from the task's row (primary database)."""
        from ...models import DelayedTask, write_db

        try:
            task_id = uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        db = write_db()
        row = DelayedTask.objects.using(db).filter(pk=task_id).first()
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        # Tasks modules first, as a worker does: this process may not have
        # imported the one that declares the task.
        registry.autodiscover()
        found, _ = lookup(row.name)
        if found is None:
            raise TaskResultDoesNotExist(result_id)
        return result_of(row, task_of(row, found), found.backend)

    def _check_declared(self, task: Task[..., Any]) -> None:
        """Refuse a task that a worker could not find again by its path."""
        path = task.module_path
        if len(path) > registry.MAX_NAME_LENGTH:
            raise InvalidTask(
                f"{path!r} is longer than {registry.MAX_NAME_LENGTH} characters, "
                f"the most a task row's name holds; shorten the module or "
                f"function name."
            )
        declared, reason = lookup(path)
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
                check_ids.BACKEND_QUEUES,
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
            check_ids.BACKEND_QUEUES,
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
                check_ids.BACKEND_OPTIONS,
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
                    check_ids.BACKEND_OPTIONS,
                    f"{where} has an unknown option {key!r}.",
                    f"Did you mean {close[0]!r}?"
                    if close
                    else f"Known options: {', '.join(OPTIONS)}.",
                )
            )
    for option, hint in _OPTION_HINTS.items():
        if option not in options:
            continue
        problem = task_option_problem(
            option, options[option], where=f'{where}["{option}"]'
        )
        if problem is not None:
            problems.append(conf.Problem(check_ids.BACKEND_OPTIONS, problem, hint))
    return problems


# -- finding tasks by name -------------------------------------------------------


def lookup(path: str) -> tuple[Task[..., Any] | None, str]:
    """Import ``path`` if it may be a task of this backend's; the task, or
    why not. Workers find tasks by it, and ``enqueue()`` refuses a task
    they could not find."""
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
