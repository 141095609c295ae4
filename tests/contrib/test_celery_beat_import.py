"""delayq_import_beat on a real django-celery-beat database (the package is
installed on the Django 5.2 leg, and its app is then in the test settings):
what it maps, what it refuses and why, and a schedule that goes on after
the last tick beat sent, neither running it again nor skipping the next."""

from __future__ import annotations

import datetime
import io
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_delayq.models import DelayedTask, PeriodicSchedule, RuntimeSchedule
from django_delayq.recurring.planner import plan
from tests.testapp.celery_style import add

beat = pytest.importorskip(
    "django_celery_beat.models",
    reason="django-celery-beat is installed on the Django 5.2 leg only",
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("delayq_import_beat", *args, stdout=out)
    return out.getvalue()


def beat_task(name: str, **fields: Any) -> Any:
    return beat.PeriodicTask.objects.create(name=name, task=add.name, **fields)


@pytest.fixture
def beat_schedules() -> None:
    crontab = beat.CrontabSchedule.objects.create(
        minute="0", hour="3", day_of_week="mon-fri", timezone="Europe/Berlin"
    )
    every_5_min = beat.IntervalSchedule.objects.create(every=5, period="minutes")
    beat_task("nightly", crontab=crontab, args="[1, 2]", queue="orders")
    beat_task("often", interval=every_5_min, kwargs='{"x": 1, "y": 2}', enabled=False)
    beat_task("expiring", interval=every_5_min, args="[1, 1]", expire_seconds=60)
    solar = beat.SolarSchedule.objects.create(
        event="sunset", latitude=52.5, longitude=13.4
    )
    beat_task("at-sunset", solar=solar, args="[1, 2]")
    beat_task("broken-args", interval=every_5_min, args="[1,")
    beat_task("wrong-arity", interval=every_5_min, args="[1, 2, 3]")
    beat.PeriodicTask.objects.create(
        name="celery.backend_cleanup", task="celery.backend_cleanup", crontab=crontab
    )


def test_dry_run_prints_the_mapping_and_writes_nothing(beat_schedules: None) -> None:
    out = run("--dry-run")
    assert "would import 'nightly': cron 0 3 * * mon-fri Europe/Berlin" in out
    assert "would import 'often': every 300 s" in out
    assert "disabled" in out
    assert "skipped 'at-sunset': solar schedule (sunset) has no equivalent" in out
    assert "skipped 'broken-args': its args are not JSON" in out
    assert "skipped 'wrong-arity':" in out
    assert "takes 2 positional arguments but 3 were given" in out
    assert (
        "skipped 'celery.backend_cleanup': celery.backend_cleanup is Celery's own"
        in out
    )
    assert out.rstrip().endswith("would import 3, skipped 4")
    assert not RuntimeSchedule.objects.exists()


def test_import_writes_runtime_schedules(beat_schedules: None) -> None:
    out = run()
    assert out.rstrip().endswith("imported 3, skipped 4")
    nightly = RuntimeSchedule.objects.get(name="nightly")
    assert (nightly.task, nightly.args, nightly.cron, nightly.time_zone) == (
        add.name,
        [1, 2],
        "0 3 * * mon-fri",
        "Europe/Berlin",
    )
    assert (nightly.queue, nightly.enabled, nightly.catch_up) == (
        "orders",
        True,
        "latest",
    )
    often = RuntimeSchedule.objects.get(name="often")
    assert (often.every, often.kwargs, often.enabled) == (300, {"x": 1, "y": 2}, False)
    assert RuntimeSchedule.objects.get(name="expiring").catch_up == "none"
    # Again: the imported ones are kept, not doubled.
    again = run()
    assert "skipped 'nightly': a runtime schedule has this name" in again
    assert RuntimeSchedule.objects.count() == 3


def test_a_schedule_goes_on_after_the_last_tick_beat_sent() -> None:
    every_minute = beat.IntervalSchedule.objects.create(every=60, period="seconds")
    # Beat sent the tick of the last whole minute; the next falls in a minute.
    last_tick = timezone.now().replace(second=0, microsecond=0)
    beat_task("per-minute", interval=every_minute, args="[1, 2]", last_run_at=last_tick)
    run()
    kept = PeriodicSchedule.objects.get(name="per-minute")
    assert kept.planned_through == last_tick
    # A planning round two seconds before the next tick.
    plan(last_tick + datetime.timedelta(seconds=58))
    ticks = sorted(
        DelayedTask.objects.filter(key__startswith="periodic:per-minute@").values_list(
            "run_at", flat=True
        )
    )
    # No tick at or before the one beat sent; the next one is written.
    assert ticks
    assert ticks[0] == last_tick + datetime.timedelta(minutes=1)


def test_a_clocked_schedule_is_scheduled_once() -> None:
    at = (timezone.now() + datetime.timedelta(hours=2)).replace(microsecond=0)
    clocked = beat.ClockedSchedule.objects.create(clocked_time=at)
    beat_task("launch", clocked=clocked, one_off=True, args="[2, 2]")
    out = run()
    assert f"imported 'launch': once at {at.isoformat()}" in out
    [task] = DelayedTask.objects.filter(name=add.name)
    assert (task.args, task.run_at, task.key) == ([2, 2], at, "beat-clocked:launch")
    run()  # again: the same task, not a second one
    assert DelayedTask.objects.filter(name=add.name).count() == 1


def test_without_django_celery_beat_installed_it_says_so(settings: Any) -> None:
    settings.INSTALLED_APPS = [
        app for app in settings.INSTALLED_APPS if app != "django_celery_beat"
    ]
    with pytest.raises(Exception, match="django_celery_beat is not in INSTALLED_APPS"):
        run()
