"""django-delayq: reliable, precise delayed tasks for Django.

The database row is the source of truth; Redis is the fast index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0.dev0"

__all__ = [
    "Call",
    "acancel",
    "areschedule",
    "aretry",
    "aschedule",
    "aschedule_many",
    "cancel",
    "current_run",
    "pause_queue",
    "paused_queues",
    "periodic",
    "raise_if_cancelled",
    "reschedule",
    "resume_queue",
    "retry",
    "schedule",
    "schedule_many",
    "task",
]

if TYPE_CHECKING:
    from .api import (
        Call,
        acancel,
        areschedule,
        aretry,
        aschedule,
        aschedule_many,
        cancel,
        reschedule,
        retry,
        schedule,
        schedule_many,
    )
    from .queues import pause_queue, paused_queues, resume_queue
    from .recurring import periodic
    from .registry import task
    from .worker.attempts import current_run, raise_if_cancelled

#: What is imported from :mod:`django_delayq.queues` on first use.
_QUEUES = frozenset({"pause_queue", "paused_queues", "resume_queue"})

#: What is imported from :mod:`django_delayq.api` on first use.
_API = (
    frozenset(__all__)
    - {"current_run", "periodic", "raise_if_cancelled", "task"}
    - _QUEUES
)


def __getattr__(name: str) -> Any:
    # Nothing is imported with the package: the pytest plugin
    # (django_delayq.testing.pytest_plugin) is loaded in sessions that may
    # have no Django settings. The API imports the models, which need the
    # app registry: imported on first use, "from django_delayq import task"
    # works in a tasks.py imported while apps are still loading.
    if name == "task":
        from .registry import task

        return task
    if name == "periodic":
        from .recurring import periodic

        return periodic
    if name in ("current_run", "raise_if_cancelled"):
        # The run under way is the worker's to know; a process that runs no
        # task imports the worker only if it asks.
        from .worker import attempts

        return getattr(attempts, name)
    if name in _QUEUES:
        from . import queues

        return getattr(queues, name)
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
