"""Beat's schedules as periodic schedules: crontab(), from_beat_schedule(),
and the entries it makes, read by DELAYQ["PERIODIC"] as any other."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from typing import Any

import pytest

from django_delayq.contrib.celery import crontab, from_beat_schedule
from django_delayq.exceptions import InvalidTaskDefinition
from django_delayq.recurring.declared import from_setting
from tests.testapp.celery_style import add
from tools.procs import ROOT


@pytest.mark.parametrize(
    ("fields", "cron"),
    [
        ({}, "* * * * *"),
        ({"minute": 0, "hour": 3}, "0 3 * * *"),
        ({"minute": "*/15", "day_of_week": "mon-fri"}, "*/15 * * * mon-fri"),
        ({"minute": {30, 0}, "hour": [9, 17]}, "0,30 9,17 * * *"),
        (
            {"minute": 0, "hour": 0, "day_of_month": "1", "month_of_year": "*/3"},
            "0 0 1 */3 *",
        ),
    ],
)
def test_crontab_is_a_cron_expression(fields: dict[str, Any], cron: str) -> None:
    assert crontab(**fields).cron == cron


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"minute": "1 2"}, "crontab\\(minute=...\\) must be a cron field"),
        ({"hour": True}, "crontab\\(hour=...\\) must be a cron field"),
        ({"nowfun": None}, "nowfun is not supported"),
        ({"day_of_month": "1-7", "day_of_week": "mon"}, "when both days match"),
    ],
)
def test_crontab_refuses_what_it_cannot_be(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidTaskDefinition, match=message):
        crontab(**fields)


def test_from_beat_schedule_maps_each_kind_of_entry() -> None:
    mapped = from_beat_schedule(
        {
            "by-cron": {
                "task": add.name,
                "schedule": crontab(minute=0, hour=3),
                "args": (1, 2),
                "options": {"queue": "orders", "priority": 5},
            },
            "by-timedelta": {
                "task": add.name,
                "schedule": datetime.timedelta(minutes=5),
                "kwargs": {"x": 1, "y": 2},
                "options": {"expires": 60},
            },
            "by-seconds": {"task": add.name, "schedule": 30.0, "args": [3, 4]},
        }
    )
    assert mapped == {
        "by-cron": {
            "task": add.name,
            "cron": "0 3 * * *",
            "args": [1, 2],
            "queue": "orders",
            "priority": 5,
        },
        "by-timedelta": {
            "task": add.name,
            "every": datetime.timedelta(minutes=5),
            "kwargs": {"x": 1, "y": 2},
            "catch_up": "none",
        },
        "by-seconds": {
            "task": add.name,
            "every": datetime.timedelta(seconds=30),
            "args": [3, 4],
        },
    }
    # Each is a DELAYQ["PERIODIC"] entry; a task's queue and priority are
    # the task's own, set on @shared_task, never overridden by a schedule.
    for name in ("by-timedelta", "by-seconds"):
        assert from_setting(name, mapped[name]).task is add
    with pytest.raises(InvalidTaskDefinition, match="has its own priority, queue"):
        from_setting("by-cron", mapped["by-cron"])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"task": "t", "schedule": object()}, "solar schedules have no equivalent"),
        ({"task": "t", "schedule": 60, "relative": True}, "relative=True"),
        ({"task": "t", "schedule": 60, "options": {"link": 1}}, "options\\['link'\\]"),
        ({"task": "t", "schedule": 60, "every": 5}, "every is not a key"),
        ("not a dict", "must be a dict with task and schedule"),
    ],
)
def test_from_beat_schedule_names_the_entry_it_cannot_map(
    entry: Any, message: str
) -> None:
    with pytest.raises(InvalidTaskDefinition, match="CELERY_BEAT_SCHEDULE\\['e'\\]"):
        from_beat_schedule({"e": entry})
    with pytest.raises(InvalidTaskDefinition, match=message):
        from_beat_schedule({"e": entry})


def test_an_entry_for_an_unknown_task_fails_when_the_setting_is_read() -> None:
    [(name, entry)] = from_beat_schedule(
        {"e": {"task": "shop.tasks.gone", "schedule": 60}}
    ).items()
    with pytest.raises(InvalidTaskDefinition, match="neither a registered task"):
        from_setting(name, entry)


def test_a_settings_module_imports_the_kit_before_the_apps_load() -> None:
    """``DELAYQ["PERIODIC"] = from_beat_schedule(...)`` in settings.py: the
    process starts, and the schedule is valid."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.testapp.celery_settings",
        "DELAYQ_TEST_CELERY": "1",
        "PYTHONPATH": str(ROOT),
    }
    # No system check here: some connect to the database, which this
    # process has no test copy of; the schedule's own checks are declared()'s.
    code = (
        "import django; django.setup(); "
        "from django_delayq.recurring import declared; "
        "schedules, problems = declared(); "
        "print(sorted(s.name for s in schedules), problems)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "['nightly-sum'] []" in done.stdout
