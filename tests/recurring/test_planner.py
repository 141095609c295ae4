"""The planner writes each tick once, ahead of its time, as a task row;
catch-up, a changed definition, a removed schedule and a pause behave as
docs/guide/periodic.md says."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.utils import timezone

from django_delayq.models import DelayedTask, PeriodicSchedule, Status
from django_delayq.recurring import periodic
from django_delayq.recurring.declared import forget
from django_delayq.recurring.planner import LOOKAHEAD, pause, plan, resume
from django_delayq.registry import unregister
from tests.support.helpers import (
    expected_score,
    indexed_score,
    schedule_ticks,
    tick_times,
)
from tests.testapp import tasks as app_tasks

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime.datetime(2026, 11, 26, 10, 0, 0, tzinfo=datetime.UTC)
SECOND = datetime.timedelta(seconds=1)

Declare = Callable[..., Any]


@pytest.fixture
def declare(settings: Any) -> Iterator[Declare]:
    """Declare a schedule of ``tests.testapp.tasks.record_tick`` (or
    ``fn``); it is forgotten at the end of the test."""
    names: list[str] = []

    def declare_one(name: str = "ticks", fn: Any = None, **options: Any) -> Any:
        registered = periodic(name=name, **options)(fn or app_tasks.record_tick)
        names.append(name)
        return registered

    yield declare_one
    for name in names:
        forget(name)
        unregister(name)


def ticks(name: str = "ticks", **filters: Any) -> list[DelayedTask]:
    return schedule_ticks(name, **filters)


times = tick_times


def test_ticks_are_written_ahead_once_with_their_key_and_time(declare, redis_client):
    declare(every=datetime.timedelta(seconds=1))
    plan(now=T0)  # first seen: it starts after now, nothing missed
    rows = ticks()
    assert times(rows) == ["10:00:01", "10:00:02", "10:00:03", "10:00:04", "10:00:05"]
    first = rows[0]
    assert first.key == "periodic:ticks@2026-11-26T10:00:01.000000Z"
    assert first.kwargs == {"tick": "2026-11-26T10:00:01.000000Z"}
    assert first.name == "ticks"
    assert first.status == Status.SCHEDULED
    # Indexed in Redis like any task, due at the tick.
    assert indexed_score(redis_client, first) == expected_score(first)
    # Planned again at once, or by another process: nothing new.
    plan(now=T0)
    plan(now=T0 + SECOND)
    assert len(ticks()) == 5
    # Once less than half the lookahead is left, the next ticks.
    plan(now=T0 + LOOKAHEAD / 2 + SECOND)
    assert times(ticks())[-1] == "10:00:08"
    assert len({row.key for row in ticks()}) == len(ticks())


def test_a_function_without_tick_gets_no_arguments(declare):
    declare(name="counter", fn=app_tasks.count_run, every=datetime.timedelta(seconds=2))
    plan(now=T0)
    rows = ticks("counter")
    assert times(rows) == ["10:00:02", "10:00:04"]
    assert rows[0].args == []
    assert rows[0].kwargs == {}


def test_each_tick_carries_the_schedules_metadata(declare, settings):
    settings.DELAYQ = {
        **settings.DELAYQ,
        "MIDDLEWARE": ["tests.testapp.middleware.TagA"],
    }
    declare(every=datetime.timedelta(seconds=1), meta={"job": "ticks"})
    plan(now=T0)
    # Merged with what the middleware's on_schedule() adds, as by hand.
    assert {str(row.meta) for row in ticks()} == {
        str({"job": "ticks", "tags": ["a:ticks"]})
    }


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # Ticks less than MISSED_AFTER (5 s) past are late, not missed: they
        # run (10:00:11 to :15); those before are missed.
        ("none", [f"10:00:{n:02d}" for n in range(11, 16)]),
        ("latest", [f"10:00:{n:02d}" for n in range(10, 16)]),
        # every tick from 10:00:01 (the first planned) to 10:00:15
        ("all", [f"10:00:{n:02d}" for n in range(1, 16)]),
    ],
)
def test_catch_up_decides_which_missed_ticks_run(declare, policy, expected):
    declare(every=datetime.timedelta(seconds=1), catch_up=policy)
    plan(now=T0)  # 10:00:01..05 written; then everything stops
    back = T0 + datetime.timedelta(seconds=15, milliseconds=500)
    plan(now=back)
    runnable = ticks(status=Status.SCHEDULED)
    due = [row for row in runnable if row.run_at <= back]
    assert times(due) == expected
    # And the schedule goes on from now, on time.
    ahead = [row for row in runnable if row.run_at > back]
    assert times(ahead) == ["10:00:16", "10:00:17", "10:00:18", "10:00:19", "10:00:20"]
    # Nothing is cancelled that may still run, nothing runs twice.
    assert len({row.key for row in runnable}) == len(runnable)


def test_catch_up_all_is_capped(declare):
    declare(every=datetime.timedelta(seconds=1), catch_up="all")
    plan(now=T0)
    plan(now=T0 + datetime.timedelta(hours=1))
    due = ticks(status=Status.SCHEDULED, run_at__lte=T0 + datetime.timedelta(hours=1))
    # The latest 100 missed, and the 5 s of ticks that are only late.
    assert len(due) == 100 + 5
    assert times(due)[:2] == ["10:58:16", "10:58:17"]
    assert times(due)[-1] == "11:00:00"


def test_a_changed_definition_replaces_the_ticks_not_yet_due(declare, caplog):
    declare(every=datetime.timedelta(seconds=1))
    plan(now=T0)
    forget("ticks")
    unregister("ticks")
    declare(every=datetime.timedelta(seconds=2))
    now = T0 + datetime.timedelta(seconds=2, milliseconds=500)
    with caplog.at_level(logging.WARNING, logger="django_delayq"):
        plan(now=now)  # the change and the new ticks, in one round
    assert "periodic schedule ticks is now every 2 s (was every 1 s)" in caplog.text
    assert "missed" not in caplog.text
    # 10:00:01 and :02 were due before the change: they stay. The old
    # definition's :03..:05 are cancelled; the new one's from now on.
    assert times(ticks(status=Status.SCHEDULED)) == [
        "10:00:01",
        "10:00:02",
        "10:00:04",
        "10:00:06",
    ]
    assert times(ticks(status=Status.CANCELLED)) == ["10:00:03", "10:00:04", "10:00:05"]


def test_a_removed_schedule_stops_and_says_so(declare, caplog):
    declare(every=datetime.timedelta(seconds=1))
    plan(now=T0)
    # The schedule is gone from the code; its function is still a task (its
    # @periodic became a @task, say).
    forget("ticks")
    now = T0 + datetime.timedelta(seconds=1, milliseconds=500)
    with caplog.at_level(logging.WARNING, logger="django_delayq"):
        plan(now=now)
        plan(now=now + datetime.timedelta(seconds=10))
    assert caplog.text.count("periodic schedule ticks is no longer declared") == 1
    assert times(ticks(status=Status.SCHEDULED)) == ["10:00:01"]  # already due
    assert times(ticks(status=Status.CANCELLED)) == [
        "10:00:02",
        "10:00:03",
        "10:00:04",
        "10:00:05",
    ]
    assert PeriodicSchedule.objects.get(name="ticks").removed_at == now


def test_a_removed_schedules_due_ticks_no_task_runs_are_cancelled(declare, caplog):
    declare(every=datetime.timedelta(seconds=1))
    plan(now=T0)
    # Gone with its function's registration: no worker could run its ticks.
    forget("ticks")
    unregister("ticks")
    now = T0 + datetime.timedelta(seconds=1, milliseconds=500)
    with caplog.at_level(logging.WARNING, logger="django_delayq"):
        plan(now=now)
    assert "1 of them were cancelled too, as no task of this deployment" in (
        caplog.text
    )
    assert times(ticks(status=Status.SCHEDULED)) == []
    assert len(ticks(status=Status.CANCELLED)) == 5


def test_a_paused_schedule_writes_nothing(declare):
    declare(every=datetime.timedelta(seconds=1))
    plan(now=T0)
    PeriodicSchedule.objects.filter(name="ticks").update(paused=True)
    plan(now=T0 + datetime.timedelta(seconds=30))
    assert times(ticks())[-1] == "10:00:05"


def test_a_schedule_from_settings_is_planned(settings):
    settings.DELAYQ = {
        **settings.DELAYQ,
        "PERIODIC": {
            "nightly": {"task": "tests.testapp.tasks.record_tick", "cron": "0 3 * * *"},
            "broken": {"task": "tests.testapp.tasks.record_tick"},
        },
    }
    result = plan(now=datetime.datetime(2026, 11, 26, 2, 59, 58, tzinfo=datetime.UTC))
    assert [row.key for row in ticks("nightly")] == [
        "periodic:nightly@2026-11-26T03:00:00.000000Z"
    ]
    assert any("['broken'] needs exactly one of cron=" in p for p in result.problems)


def test_pause_cancels_what_is_not_due_and_resume_skips_the_pause(declare):
    declare(every=datetime.timedelta(seconds=1))
    plan(now=timezone.now())
    written = len(ticks())
    cancelled = pause("ticks")
    paused = PeriodicSchedule.objects.get(name="ticks")
    assert paused.paused
    # The ticks after the pause are cancelled (those of the next few
    # seconds: most of them); any that fell due before it stays.
    assert cancelled == len(ticks(status=Status.CANCELLED)) >= written - 2
    assert all(t.run_at <= paused.paused_at for t in ticks(status=Status.SCHEDULED))
    assert pause("ticks") == 0
    plan(now=timezone.now() + datetime.timedelta(seconds=30))
    assert len(ticks()) == written  # paused: nothing new
    assert resume("ticks")
    assert not resume("ticks")
    row = PeriodicSchedule.objects.get(name="ticks")
    assert not row.paused
    # From the resume on, nothing caught up: only ticks after it.
    plan(now=row.planned_through)
    new = [t for t in ticks(status=Status.SCHEDULED) if t.run_at > paused.paused_at]
    assert len(new) == 5
    assert all(task.run_at > row.planned_through for task in new)


def test_a_bad_setting_entry_is_reported_by_the_checks(settings):
    from django.core import checks

    settings.DELAYQ = {
        **settings.DELAYQ,
        "PERIODIC": {"digest": {"task": "tests.testapp.tasks.record_tick", "every": 0}},
    }
    errors = [m for m in checks.run_checks() if m.id == "delayq.E015"]
    assert [m.msg for m in errors] == [
        "DELAYQ[\"PERIODIC\"]['digest']: every= must be a datetime.timedelta of at "
        "least 1 second (or a number of seconds); got 0."
    ]


def test_many_schedules_are_planned_in_one_round_once(declare):
    for n in range(60):
        declare(name=f"s{n:02d}", every=datetime.timedelta(seconds=1))
    plan(now=T0)
    rows = DelayedTask.objects.filter(key__startswith="periodic:s")
    assert rows.count() == 60 * 5
    assert len(set(rows.values_list("key", flat=True))) == 60 * 5
    plan(now=T0)  # another planner, the same moment: nothing more
    plan(now=T0 + LOOKAHEAD / 2 + SECOND)  # the next refill: 3 more each
    assert rows.count() == 60 * 8
    assert len(set(rows.values_list("key", flat=True))) == 60 * 8


def test_a_slow_planner_writes_late_ticks_it_does_not_skip_them(declare, caplog):
    declare(every=datetime.timedelta(seconds=1), catch_up="none")
    plan(now=T0)  # planned through 10:00:05
    # The next round comes 3 s late (a long round, a database that paused):
    # 10:00:06 to :08 are late, not missed.
    with caplog.at_level(logging.WARNING, logger="django_delayq"):
        plan(now=T0 + datetime.timedelta(seconds=8, milliseconds=100))
    assert "missed" not in caplog.text
    assert times(ticks(status=Status.SCHEDULED)) == [
        f"10:00:{n:02d}" for n in range(1, 14)
    ]


def test_without_time_zone_support_the_ticks_are_stored_in_local_time(
    declare, settings, caplog
):
    """USE_TZ = False: Django stores naive local times, and so do the
    schedule's row and its ticks."""
    settings.USE_TZ = False
    settings.TIME_ZONE = "Europe/Berlin"
    declare(every=datetime.timedelta(seconds=1))
    plan(now=T0)
    rows = ticks()
    # 10:00:01 UTC is 11:00:01 in Berlin in November.
    assert times(rows) == ["11:00:01", "11:00:02", "11:00:03", "11:00:04", "11:00:05"]
    assert rows[0].kwargs == {"tick": "2026-11-26T10:00:01.000000Z"}
    row = PeriodicSchedule.objects.get(name="ticks")
    assert timezone.is_naive(row.planned_through)
    plan(now=T0 + LOOKAHEAD / 2 + SECOND)
    assert len(ticks()) == 8
    with caplog.at_level(logging.WARNING, logger="django_delayq"):
        plan(now=T0 + datetime.timedelta(minutes=5))  # a catch-up
    assert "missed while nothing kept it" in caplog.text
    assert pause("ticks") >= 0
    assert resume("ticks")
    forget("ticks")
    unregister("ticks")
    plan(now=T0 + datetime.timedelta(minutes=6))  # retired
    assert PeriodicSchedule.objects.get(name="ticks").removed_at is not None
