"""A settings module that imports the Celery kit, as the guide shows: beat's
schedule turned into periodic schedules while settings load, before the
apps are (tests/contrib/test_celery_beat.py starts a process with it)."""

from __future__ import annotations

from django_delayq.contrib.celery import crontab, from_beat_schedule
from tests.settings import *  # noqa: F403
from tests.settings import DELAYQ

CELERY_BEAT_SCHEDULE = {
    "nightly-sum": {
        "task": "tests.testapp.celery_style.add",
        "schedule": crontab(minute=0, hour=3),
        "args": [1, 2],
    },
}

DELAYQ = {**DELAYQ, "PERIODIC": from_beat_schedule(CELERY_BEAT_SCHEDULE)}
