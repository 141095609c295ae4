"""Celery's task API on django-delayq tasks: a change of imports.

::

    from django_delayq.contrib.celery import shared_task, crontab, from_beat_schedule

* :func:`shared_task` makes an ordinary django-delayq task that also
  answers ``delay()``, ``apply_async()``, ``self.retry()`` and
  ``self.request`` (:mod:`.tasks`), mapping each Celery option or refusing
  it by name (:mod:`.options`);
* :class:`AsyncResult` is the handle ``delay()`` returns, a view of the
  task's row (:mod:`.results`);
* :class:`crontab` and :func:`from_beat_schedule` turn beat's schedules into
  periodic schedules (:mod:`.beat`).

The modules import each other in one direction only: ``options``,
``attempts``, ``results``, ``tasks``, ``beat``.
"""

from __future__ import annotations

from typing import Any, NoReturn

from .attempts import MaxRetriesExceededError, NotSupported, Request, Retry
from .beat import crontab, from_beat_schedule
from .results import (
    FAILURE,
    PENDING,
    READY_STATES,
    RETRY,
    REVOKED,
    STARTED,
    SUCCESS,
    AsyncResult,
    TaskFailed,
    TaskRevokedError,
    TimeoutError,
)
from .tasks import CeleryTask, shared_task

__all__ = [
    "FAILURE",
    "PENDING",
    "READY_STATES",
    "RETRY",
    "REVOKED",
    "STARTED",
    "SUCCESS",
    "AsyncResult",
    "CeleryTask",
    "MaxRetriesExceededError",
    "NotSupported",
    "Request",
    "Retry",
    "TaskFailed",
    "TaskRevokedError",
    "TimeoutError",
    "chain",
    "chord",
    "crontab",
    "from_beat_schedule",
    "group",
    "shared_task",
]


def _canvas(name: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotSupported(
            f"{name}() is not supported: django-delayq has no canvas. Schedule "
            f"the next task at the end of the one before it; for a fan-out, "
            f"django_delayq.schedule_many()."
        )

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


#: Celery's canvas: each raises :class:`NotSupported`, saying what to do instead.
chain = _canvas("chain")
group = _canvas("group")
chord = _canvas("chord")
