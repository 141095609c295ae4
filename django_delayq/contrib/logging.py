"""Logging filters: the task a line was logged for, and task errors kept
out of the logs.

:class:`TaskContext` adds the run under way to every record logged during
it, by any logger (the task's own, a library's), as attributes a formatter
can name: ``delayq_task_id``, ``delayq_task_name``, ``delayq_attempt`` and
``delayq_queue`` (``None`` outside a run).

A failed attempt is logged in full: the ``task retrying`` and ``task
failed`` lines of the ``django_delayq.execution`` logger carry the error's
text, a ``task failed`` line the traceback below it, and the package's
other error lines (an ``on_commit`` callback of a task that raised, a worker
thread stopped by an error) their traceback. Exception messages are written
by task code and the libraries it calls, and may quote what the task
handled: an address, a token, a row's values. :class:`RedactTaskErrors`,
named in ``LOGGING`` as Django's ``RequireDebugFalse`` is, keeps each of
those lines and their fields but replaces the text with the exception's
type.

The module imports nothing of django-delayq: ``LOGGING`` is configured
before the apps are loaded.
"""

from __future__ import annotations

import ast
import logging
import re
import sys

__all__ = ["REDACTED", "RedactTaskErrors", "TaskContext"]

#: The module that knows the run under way, once a worker has imported it.
_ATTEMPTS = "django_delayq.worker.attempts"
#: The record attributes :class:`TaskContext` sets.
_CONTEXT_FIELDS = (
    "delayq_task_id",
    "delayq_task_name",
    "delayq_attempt",
    "delayq_queue",
)


class TaskContext(logging.Filter):
    """Add the task run under way to each record (see the module's
    docstring); never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        # Only a process that runs tasks has imported the module; looking it
        # up instead of importing it keeps this filter free of the models,
        # which the web process may not have loaded when it logs.
        attempts = sys.modules.get(_ATTEMPTS)
        run = attempts.current_run() if attempts is not None else None
        values = (
            (None, None, None, None)
            if run is None
            else (str(run.id), run.name, run.attempt, run.queue)
        )
        for field, value in zip(_CONTEXT_FIELDS, values, strict=True):
            if not hasattr(record, field):
                setattr(record, field, value)
        return True


#: What stands where a task's error text was.
REDACTED = "[redacted]"

#: The task events whose line carries the error (and, when failed, the
#: traceback): see ``django_delayq.outcomes.log_event``.
_EVENTS_WITH_ERRORS = frozenset({"retrying", "failed"})
#: How those lines are logged: the event, its ``key=value`` fields, then
#: the traceback (or nothing) as the last argument.
_EVENT_FORMAT = "task %s %s%s"
#: The ``error=`` field, whose value is a Python string literal (``repr``):
#: one line, its quotes escaped inside.
_ERROR_FIELD = re.compile(
    r"""(?P<lead>^|\s)error=(?P<text>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
)
#: ``"ValueError: card declined"`` -> ``ValueError``: the type, which tells
#: an operator what went wrong, is kept.
_ERROR_TYPE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*): ")


class RedactTaskErrors(logging.Filter):
    """Strip the error text and tracebacks of task failures from
    django-delayq's log records; let every record through.

    On the ``task retrying`` and ``task failed`` lines, ``error=`` keeps the
    exception's type only (``error='RuntimeError: [redacted]'``) and the
    traceback is dropped; on every other record of a ``django_delayq``
    logger that carries an exception, the traceback is replaced by the
    exception's type. Records of other loggers pass unchanged.

    The record itself is changed, so every handler that formats it after
    this filter ran sees it redacted: give the filter to each handler that
    receives django-delayq's records (a filter on a logger does not see the
    records of its child loggers).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "django_delayq" and not record.name.startswith(
            "django_delayq."
        ):
            return True
        event = getattr(record, "delayq_event", None)
        if event in _EVENTS_WITH_ERRORS:
            _redact_event(record, event)
        if record.exc_info or record.exc_text:
            _redact_exception(record)
        return True


def _redact_event(record: logging.LogRecord, event: str) -> None:
    args = record.args
    if (
        record.msg == _EVENT_FORMAT
        and isinstance(args, tuple)
        and len(args) == 3
        and isinstance(args[1], str)
    ):
        fields = _ERROR_FIELD.sub(_redacted_field, args[1])
        record.args = (args[0], fields, "")
        return
    # A line this filter does not know how to read (a release that logs it
    # otherwise): it cannot tell the error from the rest, so nothing of the
    # line but the event and the task stays.
    record.msg = "task %s id=%s error=%r"
    record.args = (
        event,
        getattr(record, "delayq_task_id", "?"),
        REDACTED,
    )


def _redacted_field(match: re.Match[str]) -> str:
    try:
        error = ast.literal_eval(match["text"])
    except (ValueError, SyntaxError):
        error = ""
    kind = _ERROR_TYPE.match(error) if isinstance(error, str) else None
    text = f"{kind['type']}: {REDACTED}" if kind else REDACTED
    return f"{match['lead']}error={text!r}"


def _redact_exception(record: logging.LogRecord) -> None:
    kind = record.exc_info[0] if record.exc_info else None
    name = kind.__name__ if kind is not None else "an exception"
    # Formatted now, as the exception's own text must not be: the message
    # is the package's, with its arguments.
    record.msg = f"{record.getMessage()} [{name}; traceback redacted]"
    record.args = None
    record.exc_info = None
    record.exc_text = None
