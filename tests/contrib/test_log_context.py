"""django_delayq.contrib.logging.TaskContext: every record logged during a
run, by any logger, carries the run's task id, name, attempt and queue."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator

import pytest
from django.utils import timezone

from django_delayq import schedule, task
from django_delayq.contrib.logging import TaskContext
from django_delayq.testing import run_due, test_mode

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

shop_log = logging.getLogger("shop.reminders")


@task(name="log_context.remind", max_attempts=2)
def remind(order_id: int) -> None:
    shop_log.warning("reminding order %s", order_id)
    if order_id < 0:
        raise ValueError("no such order")


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.addFilter(TaskContext())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> Iterator[Kept]:
    handler = Kept()
    shop_log.addHandler(handler)
    try:
        with test_mode("manual"):
            yield handler
    finally:
        shop_log.removeHandler(handler)


def fields(record: logging.LogRecord) -> tuple[object, ...]:
    return (
        getattr(record, "delayq_task_id", "missing"),
        getattr(record, "delayq_task_name", "missing"),
        getattr(record, "delayq_attempt", "missing"),
        getattr(record, "delayq_queue", "missing"),
    )


def test_a_line_logged_in_a_run_names_the_run(kept: Kept) -> None:
    reminded = schedule(remind, args=[42])
    failing = schedule(remind, args=[-1])
    run_due(until=timezone.now() + datetime.timedelta(hours=1))
    by_message = {r.getMessage(): fields(r) for r in kept.records}
    assert by_message["reminding order 42"] == (
        str(reminded.pk),
        "log_context.remind",
        1,
        "default",
    )
    # The failing task's lines, attempt by attempt (its retry ran too).
    assert [fields(r)[2] for r in kept.records if "-1" in r.getMessage()] == [1, 2]
    assert {fields(r)[0] for r in kept.records if "-1" in r.getMessage()} == {
        str(failing.pk)
    }


def test_a_line_logged_outside_a_run_has_the_fields_empty(kept: Kept) -> None:
    shop_log.warning("a view logs")
    [record] = kept.records
    assert fields(record) == (None, None, None, None)
