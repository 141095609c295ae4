"""The Django Tasks framework, wherever it comes from.

Django 6.0 and later ship it as ``django.tasks``; Django 5.2 gets the same API
from the ``django-tasks`` backport (module ``django_tasks``), where a few
names differ. This module imports whichever applies and exposes one set of
names. Neither is required by django-delayq itself: without them
:data:`AVAILABLE` is false, nothing else is defined, and :func:`require`
says what to install.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

import django
from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "AVAILABLE",
    "DEFAULT_TASK_QUEUE_NAME",
    "FRAMEWORK",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "first_of",
    "normalize_json",
    "require",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

#: What provides the framework: ``"django.tasks"``, ``"django_tasks"`` or "".
FRAMEWORK = ""


def first_of(module: ModuleType, *names: str) -> Any:
    """The first of ``names`` that ``module`` defines: names change between
    releases of the backport, so its features are detected, not its version.
    An ``ImportError`` (the framework counts as missing) if none is there."""
    for name in names:
        if hasattr(module, name):
            return getattr(module, name)
    raise ImportError(f"{module.__name__} defines none of {', '.join(names)}")


try:
    # mypy checks the Django 6 branch (TYPE_CHECKING makes the other
    # unreachable for it); the backport mirrors it name for name.
    if TYPE_CHECKING or django.VERSION >= (6, 0):
        from django.tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import (
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django.tasks.exceptions import (
            InvalidTask,
            InvalidTaskBackend,
            TaskResultDoesNotExist,
        )
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json

        FRAMEWORK = "django.tasks"
    else:
        # The backport registers its system check (which runs every
        # backend's check()) from its AppConfig; importing the module does
        # the same, so the backend's checks run even when "django_tasks" is
        # not in INSTALLED_APPS.
        import django_tasks.checks  # noqa: F401
        from django_tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
        from django_tasks import exceptions as _backport_exceptions
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import (
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django_tasks.exceptions import TaskResultDoesNotExist

        # Named InvalidTaskError/InvalidTaskBackendError up to django-tasks
        # 0.x, like Django's since: whichever this release has.
        InvalidTask = first_of(_backport_exceptions, "InvalidTask", "InvalidTaskError")
        InvalidTaskBackend = first_of(
            _backport_exceptions, "InvalidTaskBackend", "InvalidTaskBackendError"
        )
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

        FRAMEWORK = "django_tasks"
except ImportError:
    FRAMEWORK = ""

#: Whether the framework could be imported.
AVAILABLE = bool(FRAMEWORK)


def require() -> None:
    """Raise ``ImproperlyConfigured`` naming what to install, if it is missing."""
    if not AVAILABLE:
        raise ImproperlyConfigured(
            f"django_delayq.backends.DelayQueueBackend needs Django's Tasks "
            f"framework: upgrade to Django 6.0 or later (django.tasks), or on "
            f"Django {django.get_version()} install the backport with "
            f'"pip install django-delayq[tasks]" (the django-tasks package).'
        )
