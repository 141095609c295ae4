"""A ``DELAYQ["PERIODIC"]`` entry's function runs as its ticks, and nothing else.

An entry may name any importable function (``call_command``, say). Were it
an ordinary task, any row naming it would run it with any arguments: a row
asking ``call_command`` for ``shell -c`` would run any code on the workers.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from django_delayq import schedule, transitions
from django_delayq.exceptions import TaskRefused
from django_delayq.models import DelayedTask, Status
from django_delayq.recurring.planner import plan
from django_delayq.store.keys import shard_keys
from tests.support.helpers import claim, drain, refresh
from tests.testapp.models import Ledger

pytestmark = pytest.mark.django_db(transaction=True)

READY = shard_keys("delayq", "default", 0).ready
CALL_COMMAND = "django.core.management.call_command"
T0 = datetime.datetime(2026, 11, 26, 9, 59, 58, tzinfo=datetime.UTC)


@pytest.fixture
def clear_sessions(settings):
    """The periodic guide's own example: ``call_command("clearsessions")``
    every minute (the test app has no sessions: ``diffsettings``, which
    touches no database, stands in)."""
    settings.DELAYQ = {
        **settings.DELAYQ,
        "PERIODIC": {
            "nightly-check": {
                "task": CALL_COMMAND,
                "args": ["diffsettings"],
                "every": 60,
            }
        },
    }


def shell_writing(path: Path) -> list[str]:
    """``call_command`` arguments that would write ``path`` if ever run."""
    return ["shell", "-c", f"open({str(path)!r}, 'w').write('owned')"]


def forge(
    name: str, args: list[Any], key: str | None = None, **kwargs: Any
) -> DelayedTask:
    """A row written straight into the table, as anyone with write access to
    it could."""
    return DelayedTask.objects.create(
        name=name, args=args, kwargs=kwargs, key=key, run_at=T0
    )


def deliver(redis_client, row: DelayedTask) -> DelayedTask:
    redis_client.xadd(READY, {"id": row.pk.bytes})
    drain()
    row.refresh_from_db()
    return row


@pytest.mark.usefixtures("clear_sessions")
def test_schedule_refuses_the_function_of_a_setting_with_other_arguments(tmp_path):
    target = tmp_path / "owned"
    for name in (CALL_COMMAND, "nightly-check"):
        with pytest.raises(TaskRefused, match="runs only as the ticks of its periodic"):
            schedule(name, args=shell_writing(target))
    assert not DelayedTask.objects.exists()


@pytest.mark.usefixtures("clear_sessions")
def test_schedule_refuses_a_fake_tick_with_other_arguments():
    with pytest.raises(TaskRefused) as refused:
        schedule(
            "nightly-check",
            args=["flush", "--noinput"],
            key="periodic:nightly-check@2026-11-26T10:00:00.000000Z",
        )
    message = str(refused.value)
    assert message.startswith(
        "nightly-check runs only with the arguments its "
        "DELAYQ[\"PERIODIC\"]['nightly-check'] entry declares (args=['diffsettings'], "
        "kwargs={}); this row has args=['flush', '--noinput'], kwargs={}."
    )
    assert message.endswith("Nothing was written.")
    assert not DelayedTask.objects.exists()


@pytest.mark.usefixtures("clear_sessions")
@pytest.mark.parametrize("name", [CALL_COMMAND, "nightly-check"])
@pytest.mark.parametrize(
    "key", [None, "periodic:nightly-check@2026-11-26T10:00:00.000000Z"]
)
def test_a_forged_row_is_failed_without_running_anything(
    redis_client, tmp_path, name, key
):
    target = tmp_path / "owned"
    row = deliver(redis_client, forge(name, shell_writing(target), key))
    assert not target.exists()
    assert row.status == Status.FAILED
    assert row.attempts == 1  # refused once, not retried
    assert row.last_error.startswith(
        f"TaskRefused: {name}: not called: {name} runs only"
    )


@pytest.mark.usefixtures("clear_sessions")
def test_the_declared_arguments_outside_a_tick_are_refused_too(redis_client):
    row = deliver(redis_client, forge("nightly-check", ["diffsettings"]))
    assert row.status == Status.FAILED
    assert "runs only as the ticks of its periodic schedule ('nightly-check'" in (
        row.last_error
    )


@pytest.mark.usefixtures("clear_sessions")
def test_the_ticks_run_under_the_schedules_name(redis_client):
    plan(now=T0)
    [tick] = DelayedTask.objects.all()
    assert tick.name == "nightly-check"
    assert tick.args == ["diffsettings"]
    assert tick.key == "periodic:nightly-check@2026-11-26T10:00:00.000000Z"
    DelayedTask.objects.filter(pk=tick.pk).update(run_at=timezone.now())
    tick = deliver(redis_client, tick)
    assert tick.status == Status.SUCCEEDED, tick.last_error


@pytest.mark.usefixtures("clear_sessions")
def test_a_tick_the_previous_release_wrote_under_the_functions_path_runs(
    redis_client,
):
    # The previous release registered the function under its dotted path:
    # the ticks it planned before a deploy still run, as ticks only.
    key = "periodic:nightly-check@2026-11-26T10:00:00.000000Z"
    tick = deliver(redis_client, forge(CALL_COMMAND, ["diffsettings"], key))
    assert tick.status == Status.SUCCEEDED, tick.last_error


def test_an_entry_named_like_a_registered_task_is_reported(settings):
    from django.core import checks

    settings.DELAYQ = {
        **settings.DELAYQ,
        "PERIODIC": {
            "tests.testapp.tasks.add": {"task": CALL_COMMAND, "every": 60},
        },
    }
    [error] = [m for m in checks.run_checks() if m.id == "delayq.E015"]
    assert "its task takes the schedule's name" in error.msg
    assert "rename the entry" in error.msg


def test_a_typo_in_an_entry_suggests_the_key(settings):
    from django.core import checks

    settings.DELAYQ = {
        **settings.DELAYQ,
        "PERIODIC": {
            "nightly": {"task": CALL_COMMAND, "evry": 60, "cron": "* * * * *"}
        },
    }
    [error] = [m for m in checks.run_checks() if m.id == "delayq.E015"]
    assert "unknown keys evry (did you mean 'every'?)" in error.msg


@pytest.fixture
def ledger_ticks(settings):
    """A function taking the tick's time, named by an entry."""
    settings.DELAYQ = {
        **settings.DELAYQ,
        "PERIODIC": {
            "ledger": {"task": "tests.testapp.tasks.record_tick", "every": 60}
        },
    }


@pytest.mark.usefixtures("ledger_ticks")
def test_a_tick_runs_with_the_time_its_key_names_and_no_other(redis_client):
    key = "periodic:ledger@2026-11-26T10:00:00.000000Z"
    forged = deliver(
        redis_client, forge("ledger", [], key, tick="9999-12-31T00:00:00.000000Z")
    )
    assert forged.status == Status.FAILED
    assert "tick='2026-11-26T10:00:00.000000Z', the time its key names" in (
        forged.last_error
    )
    assert not Ledger.objects.exists()
    plan(now=T0)
    [tick] = DelayedTask.objects.filter(status=Status.SCHEDULED)
    assert tick.kwargs == {"tick": "2026-11-26T10:00:00.000000Z"}
    DelayedTask.objects.filter(pk=tick.pk).update(run_at=timezone.now())
    assert deliver(redis_client, tick).status == Status.SUCCEEDED
    assert list(Ledger.objects.values_list("key", flat=True)) == [
        "2026-11-26T10:00:00.000000Z"
    ]


def test_declared_arguments_are_compared_as_rows_store_them(redis_client, settings):
    # JSON stores 1e16 as 10000000000000000: the ticks still match the entry.
    settings.DELAYQ = {
        **settings.DELAYQ,
        "PERIODIC": {"dump": {"task": "json.dumps", "args": [1e16], "every": 60}},
    }
    plan(now=T0)
    [tick] = DelayedTask.objects.all()
    assert tick.args == [10000000000000000]
    DelayedTask.objects.filter(pk=tick.pk).update(run_at=timezone.now())
    assert deliver(redis_client, tick).status == Status.SUCCEEDED


def test_declared_arguments_a_row_cannot_hold_are_reported(settings):
    from django.core import checks

    settings.DELAYQ = {
        **settings.DELAYQ,
        "PERIODIC": {
            "dump": {"task": "json.dumps", "kwargs": {"obj": {1: 2}}, "every": 60}
        },
    }
    [error] = [m for m in checks.run_checks() if m.id == "delayq.E015"]
    assert error.msg.startswith("DELAYQ[\"PERIODIC\"]['dump']: kwargs['obj']")


def test_a_removed_entrys_due_ticks_are_cancelled_not_failed(
    redis_client, settings, ledger_ticks, caplog
):
    # Planned while the entry was there (every minute): its tick of 10:00 is
    # due when the deploy that removes the entry plans.
    plan(now=T0)
    ticks = DelayedTask.objects.filter(key__startswith="periodic:ledger@")
    assert ticks.count() == 1
    settings.DELAYQ = {**settings.DELAYQ, "PERIODIC": {}}
    with caplog.at_level("WARNING", logger="django_delayq"):
        result = plan(now=T0 + datetime.timedelta(seconds=30))
    assert result.removed == ["ledger"]
    # No worker of this deployment could run them: cancelled, not left to
    # fail "not registered" attempt after attempt.
    assert set(ticks.values_list("status", flat=True)) == {Status.CANCELLED}
    assert "as no task of this deployment runs them" in caplog.text


def test_a_tick_running_when_its_entry_was_removed_is_cancelled_not_retried(
    redis_client, settings, ledger_ticks, caplog
):
    plan(now=T0)
    tick = DelayedTask.objects.get(key__startswith="periodic:ledger@")
    # A worker of the previous deployment holds the tick when the deploy
    # that removes the entry plans: running, it cannot be cancelled then.
    assert claim(tick, "1-0") == 1
    settings.DELAYQ = {**settings.DELAYQ, "PERIODIC": {}}
    assert plan(now=T0 + datetime.timedelta(seconds=30)).removed == ["ledger"]
    assert refresh(tick).status == Status.RUNNING
    # That worker died; its attempt is recovered, and a worker of this
    # deployment, which has no such task, takes the tick.
    assert transitions.recover(refresh(tick), timezone.now(), "worker gone", "default")
    with caplog.at_level("INFO", logger="django_delayq"):
        tick = deliver(redis_client, tick)
    assert tick.status == Status.CANCELLED
    assert "task name 'ledger' is not registered in this worker" in tick.last_error
    assert "a tick of periodic schedule ledger, which is no longer declared" in (
        caplog.text
    )
    # Not left in the due-set to fail again attempt after attempt.
    assert (
        redis_client.zscore(shard_keys("delayq", "default", 0).due, tick.pk.bytes)
        is None
    )
    assert not Ledger.objects.exists()
