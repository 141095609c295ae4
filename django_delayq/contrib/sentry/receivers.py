"""Connecting the Sentry integration's receivers to django-delayq's signals.

Called by the app when ``sentry_sdk`` is installed: the receivers do
nothing until Sentry is initialised (:func:`.options.active`). The cron
monitors' module is imported by the first signal it receives, in a worker:
it reads the periodic schedules, which import the API, and a process that
only serves requests (or imports only its tasks) must not pay for that
while Django sets up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.dispatch import Signal

from ... import signals
from . import failures


def _started(sender: Any, **kwargs: Any) -> None:
    from . import monitors

    monitors.on_task_started(sender, **kwargs)


def _succeeded(sender: Any, **kwargs: Any) -> None:
    from . import monitors

    monitors.on_task_succeeded(sender, **kwargs)


def _ended_badly(sender: Any, **kwargs: Any) -> None:
    from . import monitors

    monitors.on_task_ended_badly(sender, **kwargs)


def connect() -> None:
    """Connect every receiver, once however often called."""
    failures.add_event_processor()
    connections: list[tuple[Signal, Callable[..., Any], str]] = [
        (signals.task_failed, failures.on_task_failed, "failed"),
        (signals.task_retried, failures.on_task_retried, "retried"),
        (signals.task_started, _started, "monitor.started"),
        (signals.task_succeeded, _succeeded, "monitor.succeeded"),
        (signals.task_retried, _ended_badly, "monitor.retried"),
        (signals.task_failed, _ended_badly, "monitor.failed"),
    ]
    for signal, receiver, uid in connections:
        signal.connect(receiver, dispatch_uid=f"django_delayq.contrib.sentry.{uid}")
