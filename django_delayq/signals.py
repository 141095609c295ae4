"""Signals sent as tasks move through their life.

Every signal is sent with ``sender=DelayedTask`` and ``task=<the row>``:

* ``task_scheduled``, ``task_cancelled`` - after the transaction that
  scheduled or cancelled the task commits, in the process that did it;
* ``task_started`` - in the worker, after the task is claimed;
* ``task_succeeded`` (also ``result=``), ``task_retried`` (also ``error=``,
  ``run_at=``), ``task_failed`` (also ``error=``) - in the worker, after the
  outcome is committed.

Receivers run with ``send_robust``: an exception in a receiver is logged and
never stops a worker or fails a request.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.dispatch import Signal

logger = logging.getLogger(__name__)

task_scheduled = Signal()
task_cancelled = Signal()
task_started = Signal()
task_succeeded = Signal()
task_retried = Signal()
task_failed = Signal()


def send_on_commit(signal: Signal, tasks: Sequence[Any], using: str) -> None:
    """Send ``signal`` for each task once the current transaction commits."""
    from .models import DelayedTask

    if not signal.has_listeners(DelayedTask):
        return

    def send_all() -> None:
        for task in tasks:
            send(signal, task)

    transaction.on_commit(send_all, using=using)


def send(signal: Signal, task: Any, **extra: Any) -> None:
    from .models import DelayedTask

    if not signal.has_listeners(DelayedTask):
        return

    for receiver, response in signal.send_robust(DelayedTask, task=task, **extra):
        if isinstance(response, Exception):
            logger.error(
                "django-delayq: signal receiver %r raised for task %s",
                receiver,
                getattr(task, "pk", task),
                exc_info=response,
            )
