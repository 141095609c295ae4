"""Failed runs as Sentry events, each reported once.

A run is reported by the ``task_failed`` signal (policy ``"final"``), or by
``task_retried`` and ``task_failed`` (``"each_attempt"``): one event per
failed attempt at most, sent after the outcome is committed. The event is
the exception the attempt raised, with its traceback; a failure that raised
nothing (a worker lost) is a message, the row's ``last_error``.

The worker also logs each failure at ``ERROR`` on ``django_delayq.execution``,
which Sentry's logging integration would send as a second event: an event
processor drops those, unless the policy is ``"never"``.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import TYPE_CHECKING, Any

import sentry_sdk
from sentry_sdk.utils import event_from_exception

from .options import active

if TYPE_CHECKING:
    from sentry_sdk._types import Event, Hint

    from ...models import DelayedTask

#: The task events' logger (:mod:`django_delayq.outcomes`), by its documented
#: name: this module is imported by ``sentry_sdk.init()``, often in the
#: settings, before the models can be.
EVENTS_LOGGER = "django_delayq.execution"
#: The task event lines (outcomes.log_event) of a failed attempt, and the
#: policies under which this module reports that attempt itself.
_REPORTED_BY = {
    "failed": frozenset({"final", "each_attempt"}),
    "retrying": frozenset({"each_attempt"}),
}
_processor_added = False
_processor_lock = threading.Lock()


def on_task_retried(
    sender: Any, task: DelayedTask, error: str, exception: Any = None, **kwargs: Any
) -> None:
    options = active()
    if options is not None and options.failures == "each_attempt":
        report(
            task, error, exception, final=False, send_arguments=options.send_arguments
        )


def on_task_failed(
    sender: Any, task: DelayedTask, error: str, exception: Any = None, **kwargs: Any
) -> None:
    options = active()
    if options is not None and options.failures != "never":
        report(
            task, error, exception, final=True, send_arguments=options.send_arguments
        )


def report(
    row: DelayedTask,
    error: str,
    exception: BaseException | None,
    *,
    final: bool,
    send_arguments: bool,
) -> None:
    """Send one event for a failed attempt of ``row``."""
    with sentry_sdk.new_scope() as scope:
        # Grouped by task name: the default grouping (the stack) of one
        # task's failures, under the task's name in the issue list.
        scope.set_transaction_name(row.name, source="task")
        scope.set_tag("delayq.task_name", row.name)
        scope.set_tag("delayq.task_id", str(row.pk))
        scope.set_tag("delayq.queue", row.queue)
        scope.set_tag("delayq.attempt", f"{row.attempts}/{row.max_attempts}")
        scope.set_tag("delayq.final", "yes" if final else "no")
        context: dict[str, Any] = {
            "id": str(row.pk),
            "name": row.name,
            "queue": row.queue,
            "attempt": row.attempts,
            "max_attempts": row.max_attempts,
            "run_at": row.run_at.isoformat() if row.run_at else None,
            "key": row.key,
            "error": error,
        }
        if send_arguments:
            # Off by default: arguments may hold personal data or secrets.
            context["args"] = row.args
            context["kwargs"] = row.kwargs
        scope.set_context("delayq", context)
        if exception is None:
            # No stack to group by: one issue per task and kind of error,
            # whatever attempt numbers or durations its text holds.
            scope.fingerprint = ["django_delayq", row.name, re.sub(r"\d+", "N", error)]
            sentry_sdk.capture_message(error, level="error")
            return
        client = sentry_sdk.get_client()
        event, hint = event_from_exception(
            exception,
            client_options=client.options,
            mechanism={"type": "django_delayq", "handled": False},
        )
        sentry_sdk.capture_event(event, hint=hint)


def add_event_processor() -> None:
    """Drop the logged copies of reported failures, in every Sentry client
    of this process (once)."""
    global _processor_added
    with _processor_lock:
        if not _processor_added:
            sentry_sdk.scope.add_global_event_processor(drop_logged_failure)
            _processor_added = True


def drop_logged_failure(event: Event, hint: Hint) -> Event | None:
    """None (drop it) for an event made of a task's ``failed`` line, or of
    its ``retrying`` line (if the logging integration's level lets a
    warning through), when :func:`report` reports that attempt itself."""
    record = hint.get("log_record") if hint else None
    if not isinstance(record, logging.LogRecord):
        return event
    if record.name != EVENTS_LOGGER:
        return event
    policies = _REPORTED_BY.get(getattr(record, "delayq_event", None) or "")
    if not policies:
        return event
    options = active()
    if options is None or options.failures not in policies:
        return event
    return None
