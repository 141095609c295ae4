"""Schedules defined in the database (RuntimeSchedule): checked field by
field, planned exactly once like the code's, and an edit, a disable or a
delete takes effect in the next planning round."""

from __future__ import annotations

import datetime
import logging
import threading
from typing import Any

import pytest
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import connections
from django.utils import timezone

from django_delayq.models import DelayedTask, PeriodicSchedule, RuntimeSchedule, Status
from django_delayq.recurring.keeper import Keeper
from django_delayq.recurring.planner import PlanResult, plan
from django_delayq.recurring.runtime import validate
from tests.support.helpers import declared_schedule, schedule_ticks, tick_times
from tests.testapp.tasks import count_run
from tools.procs import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime.datetime(2026, 11, 26, 10, 0, 0, tzinfo=datetime.UTC)
SECOND = datetime.timedelta(seconds=1)
ADD = "tests.testapp.tasks.add"


def runtime(name: str = "adds", **fields: Any) -> RuntimeSchedule:
    values: dict[str, Any] = {"task": ADD, "args": [1, 2], "every": 1, **fields}
    return RuntimeSchedule.objects.create(name=name, **values)


def ticks(name: str = "adds", **filters: Any) -> list[DelayedTask]:
    return schedule_ticks(name, **filters)


times = tick_times


def errors(**fields: Any) -> dict[str, list[str]]:
    values: dict[str, Any] = {"name": "adds", "task": ADD, "args": [1, 2], **fields}
    if "cron" not in fields and "every" not in fields:
        values["every"] = 60
    with pytest.raises(ValidationError) as caught:
        validate(RuntimeSchedule(**values))
    return caught.value.message_dict


# -- the checks ---------------------------------------------------------------


def test_a_valid_row_is_a_schedule_like_a_declared_one():
    schedule = validate(
        RuntimeSchedule(
            name="reminders",
            task="reminders.send",
            args=[7],
            kwargs={"text": "hi"},
            cron="0 8 * * 1-5",
            time_zone="Europe/Berlin",
            queue="reports",
            priority=5,
            catch_up="none",
        )
    )
    assert schedule.task.name == "reminders.send"
    assert (schedule.args, dict(schedule.kwargs)) == ((7,), {"text": "hi"})
    assert (schedule.queue, schedule.priority, schedule.catch_up) == (
        "reports",
        5,
        "none",
    )
    assert schedule.definition.startswith("cron 0 8 * * 1-5 Europe/Berlin [")
    call = schedule.call(T0)
    assert (call.queue, call.priority, call.key) == (
        "reports",
        5,
        "periodic:reminders@2026-11-26T10:00:00.000000Z",
    )


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        ({"cron": "61 * * * *"}, "cron", "is not a valid cron expression"),
        ({"cron": "* * *"}, "cron", "must be a cron expression of 5 fields"),
        ({"cron": "0 8 * * *", "every": 60}, NON_FIELD_ERRORS, "got both"),
        ({"cron": "", "every": None}, NON_FIELD_ERRORS, "got neither"),
        ({"every": 0}, "every", "at least 1 second"),
        ({"task": "shop.nope"}, "task", "'shop.nope' is not a registered task"),
        (
            {"args": [1]},
            "args",
            "cannot call tests.testapp.tasks.add: add() missing a required argument: "
            "'b'; it is add(a, b)",
        ),
        ({"kwargs": {"c": 3}}, "args", "got an unexpected keyword argument 'c'"),
        ({"args": {"a": 1}}, "args", "args must be a list"),
        ({"kwargs": [1]}, "kwargs", "kwargs must be a dict"),
        (
            {"cron": "0 8 * * *", "time_zone": "Mars/Olympus"},
            "time_zone",
            "is not a time zone this machine knows",
        ),
        ({"time_zone": "Europe/Berlin"}, "time_zone", "applies to cron only"),
        ({"catch_up": "some"}, "catch_up", 'must be "none", "latest" or "all"'),
        ({"queue": "nowhere"}, "queue", "queue='nowhere' is not configured"),
        ({"priority": 1000}, "priority", "must be an integer from -100 to 100"),
        ({"name": "a@b"}, "name", "cannot contain '@'"),
    ],
)
def test_each_bad_field_gets_its_own_error(fields, field, text):
    found = errors(**fields)
    assert list(found) == [field]
    assert text in " ".join(found[field])


def test_a_name_a_code_schedule_has_is_refused():
    with declared_schedule("carts", count_run, every=datetime.timedelta(seconds=30)):
        found = errors(name="carts")
    assert "a schedule declared in the code" in found["name"][0]


# -- planning -----------------------------------------------------------------


def test_its_ticks_are_written_ahead_once_with_its_queue_and_priority(redis_client):
    runtime(queue="reports", priority=3)
    plan(now=T0)
    rows = ticks()
    assert times(rows) == ["10:00:01", "10:00:02", "10:00:03", "10:00:04", "10:00:05"]
    first = rows[0]
    assert first.key == "periodic:adds@2026-11-26T10:00:01.000000Z"
    assert (first.name, first.args, first.kwargs) == (ADD, [1, 2], {})
    assert (first.queue, first.priority) == ("reports", 3)
    plan(now=T0)  # another planner, the same moment: nothing more
    assert len(ticks()) == 5


def test_two_planners_racing_write_each_tick_once(redis_client):
    runtime()
    rounds = 12
    barrier = threading.Barrier(2, timeout=30)
    results: dict[int, list[PlanResult]] = {0: [], 1: []}
    failures: list[BaseException] = []

    def planner(who: int) -> None:
        try:
            for n in range(rounds):
                barrier.wait()  # both plan the same round at the same moment
                # A microsecond apart, as two processes' clocks are.
                now = T0 + n * SECOND + datetime.timedelta(microseconds=who)
                results[who].append(plan(now=now))
        except BaseException as exc:
            failures.append(exc)
            barrier.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=planner, args=(who,)) for who in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures
    rows = ticks()
    # Every tick from the first to the last horizon planned, once, and each
    # counted by the one planner that wrote it.
    planned_through = PeriodicSchedule.objects.get(name="adds").planned_through
    expected = [
        (T0 + n * SECOND).strftime("%H:%M:%S")
        for n in range(1, int((planned_through - T0) / SECOND) + 1)
    ]
    assert len(expected) >= rounds
    assert times(rows) == expected
    assert {row.status for row in rows} == {Status.SCHEDULED}
    assert sum(r.planned for who in results for r in results[who]) == len(rows)


def test_an_edit_replaces_the_ticks_not_yet_due(caplog):
    schedule = runtime()
    plan(now=T0)
    schedule.every = 2
    schedule.save()
    now = T0 + datetime.timedelta(seconds=2, milliseconds=500)
    with caplog.at_level(logging.WARNING, logger="django_delayq"):
        plan(now=now)  # the next round sees the edit
    assert "periodic schedule adds is now every 2 s [" in caplog.text
    # :01 and :02 were due before the edit: they stay.
    assert times(ticks(status=Status.SCHEDULED)) == [
        "10:00:01",
        "10:00:02",
        "10:00:04",
        "10:00:06",
    ]
    assert times(ticks(status=Status.CANCELLED)) == ["10:00:03", "10:00:04", "10:00:05"]


def test_an_edit_of_the_arguments_alone_replaces_the_ticks_not_yet_due():
    schedule = runtime()
    plan(now=T0)
    schedule.args = [5, 6]
    schedule.save()
    plan(now=T0 + datetime.timedelta(milliseconds=1500))
    scheduled = ticks(status=Status.SCHEDULED)
    assert [row.args for row in scheduled] == [[1, 2]] + [[5, 6]] * 5
    assert times(scheduled)[1:] == [
        "10:00:02",
        "10:00:03",
        "10:00:04",
        "10:00:05",
        "10:00:06",
    ]


def test_disable_stops_the_ticks_and_enable_starts_from_the_next(caplog):
    schedule = runtime()
    plan(now=T0)
    schedule.enabled = False
    schedule.save()
    with caplog.at_level(logging.WARNING, logger="django_delayq"):
        plan(now=T0 + datetime.timedelta(milliseconds=1500))
        plan(now=T0 + datetime.timedelta(seconds=30))
    assert caplog.text.count("periodic schedule adds is disabled: its 4 future") == 1
    assert times(ticks(status=Status.SCHEDULED)) == ["10:00:01"]  # due already
    assert len(ticks(status=Status.CANCELLED)) == 4
    schedule.enabled = True
    schedule.save()
    plan(now=T0 + datetime.timedelta(seconds=60))
    # The ticks that fell while it was disabled are skipped.
    assert times(ticks(status=Status.SCHEDULED)) == [
        "10:00:01",
        "10:01:01",
        "10:01:02",
        "10:01:03",
        "10:01:04",
        "10:01:05",
    ]


def test_a_deleted_schedule_stops(caplog):
    runtime().delete()
    plan(now=T0)
    assert ticks() == []
    runtime()
    plan(now=T0)
    RuntimeSchedule.objects.filter(name="adds").delete()
    with caplog.at_level(logging.WARNING, logger="django_delayq"):
        plan(now=T0 + datetime.timedelta(milliseconds=500))
    assert "adds is no longer declared in the code or the admin" in caplog.text
    assert ticks(status=Status.SCHEDULED) == []
    assert PeriodicSchedule.objects.get(name="adds").removed_at is not None


def test_no_tick_after_it_expires():
    runtime(expires_at=T0 + datetime.timedelta(seconds=3))
    plan(now=T0)
    plan(now=T0 + datetime.timedelta(seconds=10))
    assert times(ticks()) == ["10:00:01", "10:00:02", "10:00:03"]


def test_a_row_that_fails_the_checks_writes_nothing_and_is_reported(caplog):
    runtime(task="shop.gone")
    with caplog.at_level(logging.ERROR, logger="django_delayq"):
        result = plan(now=T0)
    assert result.problems == [
        "runtime schedule 'adds': schedule 'adds': 'shop.gone' is not a registered "
        "task; choose the name of a @task or @periodic function."
    ]
    assert "periodic schedule left out: runtime schedule 'adds'" in caplog.text
    assert ticks() == []


def test_a_code_schedule_of_the_same_name_wins():
    runtime(name="carts")
    with declared_schedule("carts", count_run, every=datetime.timedelta(seconds=2)):
        result = plan(now=T0)
        assert any("a schedule declared in the code" in p for p in result.problems)
        assert [row.name for row in ticks("carts")] == ["carts", "carts"]


def test_a_keeper_applies_an_edit_within_its_next_rounds(redis_client):
    """As in a dispatcher: the keeper plans about once a second, in real
    time."""
    schedule = runtime(every=1)
    keeper = Keeper("test", interval=0.2)
    keeper.start()
    try:
        wait_for(lambda: len(ticks(status=Status.SCHEDULED)) >= 4, 10, "ticks")
        schedule.enabled = False
        schedule.save()
        disabled_at = timezone.now()

        def nothing_ahead() -> bool:
            ahead = ticks(status=Status.SCHEDULED, run_at__gt=timezone.now())
            return (
                not ahead
                and PeriodicSchedule.objects.get(name="adds").removed_at is not None
            )

        wait_for(nothing_ahead, 10, "the ticks ahead cancelled")
        assert timezone.now() - disabled_at < datetime.timedelta(seconds=3)
    finally:
        keeper.stop()


# -- what the reports say ------------------------------------------------------


def test_an_enabled_schedule_nothing_planned_yet_is_behind_in_the_reports():
    from django_delayq.recurring.overview import declared_names, schedule_states

    runtime("never-planned")
    runtime("off", enabled=False)
    names = declared_names()
    assert "never-planned" in names
    assert "off" not in names
    now = timezone.now()
    [state] = [
        s
        for s in schedule_states(now, declared_names=names)
        if s.name == "never-planned"
    ]
    assert state.planned_through is None
    assert state.behind(now)
