"""RedactTaskErrors on records no worker writes: a task event line of a shape
it does not know, a second pass, and the records of other loggers. Real
failed attempts are in tests/contrib/test_log_redaction.py."""

from __future__ import annotations

import logging
import sys

from django_delayq.contrib.logging import REDACTED, RedactTaskErrors

SECRET = "hunter2-secret"


def record(
    name: str, msg: str, args: tuple[object, ...], **extra: object
) -> logging.LogRecord:
    made = logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)
    made.__dict__.update(extra)
    return made


def formatted(made: logging.LogRecord) -> str:
    return logging.Formatter("%(message)s").format(made)


def test_an_event_line_of_an_unknown_shape_keeps_only_the_event_and_the_task():
    """Fails closed: a line this filter cannot read loses everything but
    what names the task."""
    made = record(
        "django_delayq.execution",
        "task %s: %s (%s)",
        ("failed", "abc", f"ValueError: {SECRET}"),
        delayq_event="failed",
        delayq_task_id="abc",
    )
    assert RedactTaskErrors().filter(made)
    assert formatted(made) == f"task failed id=abc error='{REDACTED}'"


def test_an_error_without_a_type_is_redacted_whole_and_twice_is_once():
    made = record(
        "django_delayq.execution",
        "task %s %s%s",
        ("failed", f"id=1 error='worker lost: {SECRET}' late_ms=3", "\ntrace"),
        delayq_event="failed",
        delayq_task_id="1",
    )
    redact = RedactTaskErrors()
    assert redact.filter(made)
    once = formatted(made)
    assert redact.filter(made)
    assert formatted(made) == once == f"task failed id=1 error='{REDACTED}' late_ms=3"


def test_records_of_other_loggers_pass_unchanged():
    try:
        raise ValueError(SECRET)
    except ValueError:
        exc_info = sys.exc_info()
    made = record("shop.payments", "charge failed: %s", (SECRET,))
    made.exc_info = exc_info
    assert RedactTaskErrors().filter(made)
    text = formatted(made)
    assert f"charge failed: {SECRET}" in text
    assert f"ValueError: {SECRET}" in text
