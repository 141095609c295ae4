"""Connecting the Sentry integration's receivers to django-delayq's signals.

Called by the app when ``sentry_sdk`` is installed: the receivers do
nothing until Sentry is initialised (:func:`.options.active`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.dispatch import Signal

from ... import signals
from . import failures, monitors


def connect() -> None:
    """Connect every receiver, once however often called."""
    failures.add_event_processor()
    connections: list[tuple[Signal, Callable[..., Any], str]] = [
        (signals.task_failed, failures.on_task_failed, "failed"),
        (signals.task_retried, failures.on_task_retried, "retried"),
        (signals.task_started, monitors.on_task_started, "monitor.started"),
        (signals.task_succeeded, monitors.on_task_succeeded, "monitor.succeeded"),
        (signals.task_retried, monitors.on_task_ended_badly, "monitor.retried"),
        (signals.task_failed, monitors.on_task_ended_badly, "monitor.failed"),
    ]
    for signal, receiver, uid in connections:
        signal.connect(receiver, dispatch_uid=f"django_delayq.contrib.sentry.{uid}")
