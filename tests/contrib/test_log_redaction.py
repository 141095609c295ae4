"""RedactTaskErrors on the log records of real failed attempts: a worker runs
a task whose exception carries a secret, and the secret reaches a handler
without the filter, never one with it (configured as docs/security.md
configures it)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.utils.module_loading import import_string

from django_delayq import schedule
from django_delayq.contrib.logging import REDACTED
from django_delayq.models import Status
from tests.support.docs_text import DOCS, fences
from tests.support.helpers import drain, refresh
from tests.testapp.tasks import always_fails, raises_on_commit

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "sk_live_4242424242424242"


def documented_logging() -> dict[str, Any]:
    """The ``LOGGING`` setting of docs/security.md."""
    (block,) = [
        fence
        for fence in fences(DOCS / "security.md")
        if fence.options.get("name") == "logging-redact-task-errors"
    ]
    namespace: dict[str, Any] = {}
    exec(block.body, namespace)
    config: dict[str, Any] = namespace["LOGGING"]
    return config


class Lines(logging.Handler):
    """Each record as the default formatter writes it, traceback included."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def handlers() -> Iterator[tuple[Lines, Lines]]:
    """Two handlers on the ``django_delayq`` logger: one plain, then one with
    the filter the docs configure. The plain one comes first: the filter
    changes the record, and the plain handler must see it as logged."""
    config = documented_logging()
    (handler_name,) = config["loggers"]["django_delayq"]["handlers"]
    (filter_name,) = config["handlers"][handler_name]["filters"]
    factory = import_string(config["filters"][filter_name]["()"])
    plain, redacted = Lines(), Lines()
    redacted.addFilter(factory())
    logger = logging.getLogger("django_delayq")
    logger.addHandler(plain)
    logger.addHandler(redacted)
    try:
        yield plain, redacted
    finally:
        logger.removeHandler(plain)
        logger.removeHandler(redacted)


def test_a_failed_task_logs_its_secret_only_where_the_filter_is_not(
    redis_client, handlers
):
    plain, redacted = handlers
    task = schedule(always_fails, args=[f"card {SECRET} declined"], max_attempts=1)
    drain()
    assert refresh(task).status == Status.FAILED

    # Without the filter: the error on the line, and the traceback below it.
    assert f"error='RuntimeError: card {SECRET} declined'" in plain.text
    assert f"RuntimeError: card {SECRET} declined\n" in plain.text + "\n"
    assert "Traceback (most recent call last)" in plain.text
    # With it: the same line, its fields and the error's type, nothing more.
    assert SECRET not in redacted.text
    assert "Traceback" not in redacted.text
    (line,) = [line for line in redacted.lines if " task failed " in line]
    assert f"id={task.pk}" in line
    assert "attempt=1/1" in line
    assert f"error='RuntimeError: {REDACTED}'" in line


def test_a_retrying_task_logs_its_secret_only_where_the_filter_is_not(
    redis_client, handlers
):
    plain, redacted = handlers
    task = schedule(always_fails, args=[f"token={SECRET}"], max_attempts=2)
    drain()
    assert refresh(task).attempts >= 1
    assert f"error='RuntimeError: token={SECRET}'" in plain.text
    assert SECRET not in redacted.text
    (line, *_) = [line for line in redacted.lines if " task retrying " in line]
    assert f"id={task.pk}" in line
    assert f"error='RuntimeError: {REDACTED}'" in line
    assert "retry_at=" in line


def test_a_traceback_logged_by_the_worker_keeps_only_the_exceptions_type(
    redis_client, handlers
):
    """A task's on_commit callback that raised: the worker logs the
    exception with its traceback."""
    plain, redacted = handlers
    task = schedule(raises_on_commit, args=["paid"])
    drain()
    assert refresh(task).status == Status.SUCCEEDED
    assert "RuntimeError: callback bug" in plain.text
    assert "callback bug" not in redacted.text
    assert "Traceback" not in redacted.text
    (line,) = [line for line in redacted.lines if "on_commit callback" in line]
    assert line.endswith("[RuntimeError; traceback redacted]")


def test_the_documented_logging_setting_is_one_dict_config_accepts():
    """Configured in a process of its own: dictConfig replaces the handlers
    of the process that runs it."""
    script = (
        "import json, logging.config, sys\n"
        "logging.config.dictConfig(json.loads(sys.argv[1]))\n"
        "handler, = logging.getLogger('django_delayq').handlers\n"
        "print(type(handler.filters[0]).__qualname__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(documented_logging())],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.stdout.strip() == "RedactTaskErrors"
