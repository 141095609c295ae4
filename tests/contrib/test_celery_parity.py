"""The Celery kit against the real Celery (installed on the Django 5.2 leg):
the same crontab fires at the same minutes, Celery's own schedule objects in
a beat schedule are read as written, and every option of Celery's Task is
mapped or refused by name."""

from __future__ import annotations

import datetime
import inspect
from typing import Any

import pytest
from cronsim import CronSim

from django_delayq.contrib.celery import crontab, from_beat_schedule
from django_delayq.contrib.celery.options import (
    CALL_OPTIONS,
    MAPPED_TASK_OPTIONS,
    REFUSED_CALL_OPTIONS,
    REFUSED_TASK_OPTIONS,
)

celery_schedules = pytest.importorskip(
    "celery.schedules", reason="celery is installed on the Django 5.2 leg only"
)
celery_task = pytest.importorskip("celery.app.task")

SPECS: list[dict[str, Any]] = [
    {"minute": "*/15"},
    {"minute": 0, "hour": "*/3"},
    {"minute": "0,30", "hour": "9-17", "day_of_week": "mon-fri"},
    {"minute": 5, "hour": 4, "day_of_week": "sun"},
    {"minute": 0, "hour": 0, "day_of_month": "1,15"},
    {"minute": 0, "hour": 12, "day_of_month": "1", "month_of_year": "*/3"},
    {"minute": {0, 20, 40}, "hour": [1, 2]},
]


def celery_minutes(spec: dict[str, Any], start: datetime.datetime, days: int) -> list:
    """Every minute Celery's crontab matches, by its own parsed fields (all
    of them must match, as in Celery's scheduler)."""
    schedule = celery_schedules.crontab(**spec)
    found = []
    moment = start
    end = start + datetime.timedelta(days=days)
    while moment < end:
        celery_weekday = (moment.weekday() + 1) % 7  # Celery: Sunday is 0
        if (
            moment.minute in schedule.minute
            and moment.hour in schedule.hour
            and celery_weekday in schedule.day_of_week
            and moment.day in schedule.day_of_month
            and moment.month in schedule.month_of_year
        ):
            found.append(moment)
        moment += datetime.timedelta(minutes=1)
    return found


def our_minutes(spec: dict[str, Any], start: datetime.datetime, days: int) -> list:
    ticks = CronSim(crontab(**spec).cron, start - datetime.timedelta(minutes=1))
    end = start + datetime.timedelta(days=days)
    found = []
    for tick in ticks:
        if tick >= end:
            return found
        found.append(tick)
    return found


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: repr(spec))
def test_crontab_fires_when_celery_s_does(spec: dict[str, Any]) -> None:
    start = datetime.datetime(2026, 1, 1)
    days = 120  # through month ends and a quarter
    expected = celery_minutes(spec, start, days)
    assert expected  # the spec fires at all in the span
    assert our_minutes(spec, start, days) == expected


def test_celery_s_own_schedules_in_a_beat_schedule_are_read() -> None:
    mapped = from_beat_schedule(
        {
            "cron": {
                "task": "t",
                "schedule": celery_schedules.crontab(minute="*/10", day_of_week="1-5"),
            },
            "every": {
                "task": "t",
                "schedule": celery_schedules.schedule(datetime.timedelta(seconds=90)),
            },
        }
    )
    assert mapped["cron"]["cron"] == "*/10 * * * 1-5"
    assert mapped["every"]["every"] == datetime.timedelta(seconds=90)


#: Attributes of Celery's Task that are no options a task is declared with.
NOT_OPTIONS = {
    "Request",
    "Strategy",
    "MaxRetriesExceededError",
    "OperationalError",
    "abstract",
    "app",
    "backend",
    "from_config",
    "priority",  # mapped; a class attribute of Celery's Task too
    "request_stack",
    "trail",
    "resultrepr_maxsize",
    "send_events",
    "_app",
    "_backend",
    "_exec_options",
    "_decorated",
    "_default_request",
    "_default_request_stack",
    "_stackprotected",
    "__trace__",
    "__v2_compat__",
    "__header__",
}


def test_every_option_of_celery_s_task_is_mapped_or_refused() -> None:
    options = {
        name
        for name, value in vars(celery_task.Task).items()
        if not name.startswith("_")
        and not callable(value)
        and not isinstance(value, property | classmethod | staticmethod)
    } - NOT_OPTIONS
    unhandled = options - MAPPED_TASK_OPTIONS - set(REFUSED_TASK_OPTIONS)
    assert not unhandled, f"Celery task options neither mapped nor refused: {unhandled}"


def test_every_option_of_apply_async_is_mapped_or_refused() -> None:
    parameters = inspect.signature(celery_task.Task.apply_async).parameters
    named = {name for name in parameters if name not in ("self", "args", "kwargs")}
    named -= {"options"}  # **options
    unhandled = named - CALL_OPTIONS - set(REFUSED_CALL_OPTIONS)
    assert not unhandled, f"apply_async options neither mapped nor refused: {unhandled}"
