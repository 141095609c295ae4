"""Signals sent as tasks move through their life.

Every signal is sent with ``sender=DelayedTask`` and ``task=<the row>``:

* ``task_scheduled``, ``task_cancelled`` - after the transaction that
  scheduled or cancelled the task commits, in the process that did it;
* ``task_started`` - in the worker, after the task is claimed;
* ``task_succeeded`` (also ``result=``), ``task_retried`` (also ``error=``,
  ``run_at=``, ``exception=``), ``task_failed`` (also ``error=``,
  ``exception=``) - in the worker, after the outcome is committed.
  ``exception`` is the exception the attempt raised, with its traceback,
  or None when nothing raised (a worker lost).

Five more are sent by the machinery rather than for one task, each with the
sender and keyword arguments given:

* ``entry_dead_lettered`` - ``sender=DelayedTask``, ``stream=`` (the ready
  stream's key) and ``reason=``: a worker moved an entry it cannot run to
  the dead letters;
* ``outbox_written`` - ``sender=OutboxEntry``, ``queues=`` (one queue name
  per entry): Redis refused an index write, which went to the outbox;
* ``outbox_replayed`` - ``sender=OutboxEntry``, ``queues=``: outbox entries
  replayed into Redis;
* ``sweep_finished`` - ``sender=Sweeper`` (the class), ``result=`` (its
  ``SweepResult``): a sweep pass ended, or was skipped;
* ``task_throttled`` - ``sender=DelayedTask``, ``queue=`` and ``task_ids=``
  (a list of ids): in the dispatcher, tasks fell due and wait for a
  concurrency or rate limit (see docs/guide/flow-control.md).

The metrics (:mod:`django_delayq.metrics`) count by receiving these
signals: the rest of the package never calls them.

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

entry_dead_lettered = Signal()
outbox_written = Signal()
outbox_replayed = Signal()
sweep_finished = Signal()
task_throttled = Signal()


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
    """Send a task's ``signal`` for ``task``, robustly."""
    from .models import DelayedTask

    if not signal.has_listeners(DelayedTask):
        return
    pk = getattr(task, "pk", task)
    _send_robust(signal, DelayedTask, f" for task {pk}", task=task, **extra)


def notify(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send one of the machinery's ``signal`` robustly; nothing is built
    when nobody listens."""
    if signal.has_listeners(sender):
        _send_robust(signal, sender, "", **kwargs)


def _send_robust(signal: Signal, sender: Any, about: str, **kwargs: Any) -> None:
    """A receiver's exception is logged (``about`` says what the signal was
    about), never raised."""
    for receiver, response in signal.send_robust(sender, **kwargs):
        if isinstance(response, Exception):
            logger.error(
                "django-delayq: signal receiver %r raised%s",
                receiver,
                about,
                exc_info=response,
            )
