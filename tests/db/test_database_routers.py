"""Every query and transaction of django-delayq goes to the database the
router names for writing its models, whatever it says for reads."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from django_delayq.models import DelayedTask, PeriodicSchedule
from django_delayq.recurring.planner import pause, plan, resume
from tests.support.helpers import declared_schedule
from tests.testapp.tasks import record_tick

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "replica"])

SECOND = datetime.timedelta(seconds=1)


@override_settings(DATABASE_ROUTERS=["tests.support.routers.ReadReplicaRouter"])
def test_the_planner_reads_and_writes_the_schedules_on_the_primary(redis_client):
    # An hour ahead, so that every tick is still to come when it is paused.
    later = timezone.now() + datetime.timedelta(hours=1)
    ticks = DelayedTask.objects.using("default").filter(key__startswith="periodic:")
    with declared_schedule("ticks", record_tick, every=SECOND):
        plan(now=later)
        first = ticks.count()
        assert first >= 4
        # A round later, from the row it wrote: the compare-and-set reads
        # planned_through where it wrote it, not from the lagging replica.
        plan(now=later + 3 * SECOND)
        assert ticks.count() == first + 3
        assert pause("ticks") == first + 3
        assert resume("ticks")
    assert len(set(ticks.values_list("key", flat=True))) == first + 3
    assert PeriodicSchedule.objects.using("default").get(name="ticks")
    assert not DelayedTask.objects.using("replica").exists()
    assert not PeriodicSchedule.objects.using("replica").exists()


@override_settings(DATABASE_ROUTERS=["tests.support.routers.TasksElsewhereRouter"])
def test_the_whole_flow_runs_on_the_database_of_the_task_tables(redis_client):
    from django.core.management import call_command

    from django_delayq import cancel, schedule
    from tests.support.helpers import drain
    from tests.testapp.tasks import add

    ran = schedule(add, args=[1, 2])
    cancelled = schedule(add, args=[3, 4], delay=60)
    assert cancel(cancelled)
    drain()
    call_command("delayq_sweep", once=True, verbosity=0)
    rows = DelayedTask.objects.using("replica")
    assert rows.get(pk=ran.pk).status == "succeeded"
    assert rows.get(pk=cancelled.pk).status == "cancelled"
    assert not DelayedTask.objects.using("default").exists()


@override_settings(DATABASE_ROUTERS=["tests.support.routers.TasksElsewhereRouter"])
def test_schedule_in_a_transaction_of_another_database_is_refused(redis_client):
    from django.db import transaction

    from django_delayq import cancel, schedule
    from django_delayq.exceptions import InvalidArgument
    from tests.testapp.models import Order
    from tests.testapp.tasks import add

    kept = schedule(add, args=[0, 0], delay=60)
    # A transaction of the default database, where the shop's data is.
    with pytest.raises(InvalidArgument) as refused, transaction.atomic():
        Order.objects.create()
        schedule(add, args=[1, 2], delay=60)
    assert not Order.objects.exists()
    assert str(refused.value).startswith(
        "Called inside a transaction of database 'default', but task rows live "
        "in 'replica' (the router's database for writing DelayedTask): the row "
        "would commit at once, on its own"
    )
    with pytest.raises(InvalidArgument), transaction.atomic():
        cancel(kept)
    assert list(DelayedTask.objects.using("replica")) == [kept]
    assert DelayedTask.objects.using("replica").get().status == "scheduled"

    # The two ways the message gives: the call once the transaction commits,
    # or a transaction of the task rows' database.
    with transaction.atomic():
        transaction.on_commit(lambda: schedule(add, args=[3, 4], delay=60))
    with transaction.atomic(using="replica"):
        schedule(add, args=[5, 6], delay=60)
    assert sorted(
        args
        for args in DelayedTask.objects.using("replica").values_list("args", flat=True)
    ) == [[0, 0], [3, 4], [5, 6]]


@override_settings(DATABASE_ROUTERS=["tests.support.routers.OutboxApartRouter"])
def test_a_router_that_splits_the_apps_models_is_e018():
    from django.core import checks

    [error] = [m for m in checks.run_checks() if m.id == "delayq.E018"]
    assert error.msg == (
        "The database router sends OutboxEntry rows to 'replica' and "
        "DelayedTask rows to 'default': django-delayq's rows commit together, "
        "so they must share one database."
    )


def test_without_a_router_there_is_no_e018():
    from django.core import checks

    assert not [m for m in checks.run_checks() if m.id == "delayq.E018"]


@pytest.mark.parametrize(
    ("server", "shown"),
    [("MySQL 8.0.36", "MySQL 8.0.36"), ("MariaDB 10.5.27", "MariaDB 10.5.27")],
)
def test_an_untested_mysql_server_for_the_task_rows_is_refused_as_e019(
    server: str, shown: str
) -> None:
    """As a project on MySQL meets it: ``migrate`` (which checks the
    database, as ``check --database`` does) fails, and says how to go on."""
    done = check_as_a_project_on(server, "--database", "default")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        f"(delayq.E019) The task rows' database 'default' is {shown}, on which "
        "django-delayq is not tested" in done.stderr
    )
    assert "MariaDB 10.6 or later" in done.stderr
    assert "SILENCED_SYSTEM_CHECKS" in done.stderr


def test_a_mariadb_connection_without_utf8mb4_is_refused_as_e020() -> None:
    """Django's default charset on MySQL, utf8, cannot carry an emoji."""
    done = check_as_a_project_on("MariaDB 10.11.9")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "E019" not in done.stderr
    assert (
        "(delayq.E020) The task rows' database 'default' is connected in 'utf8', "
        "which cannot carry 4-byte characters" in done.stderr
    )
    assert "['OPTIONS']['charset'] = 'utf8mb4'" in done.stderr


def test_the_suites_database_is_not_e019():
    """PostgreSQL, SQLite or MariaDB 10.11, whichever the suite runs on."""
    from django.core import checks

    found = checks.run_checks(databases=["default"])
    assert not [m for m in found if m.id in ("delayq.E019", "delayq.E020")]
    # Nor does Django warn about the conditional constraint and index that
    # MariaDB lacks: migration 0009 takes their place there.
    assert not [m for m in found if m.id in ("models.W036", "models.W037")]


@override_settings(
    DATABASE_ROUTERS=["tests.support.routers.TaskReadsFromReplicaRouter"]
)
def test_the_admin_decides_its_pause_on_the_primary_not_a_lagging_replica(
    redis_client, django_user_model
):
    """The replica still shows the schedule running; it was paused already."""
    from django.test import Client
    from django.urls import reverse

    with declared_schedule("carts", record_tick, every=SECOND):
        plan()
        pause("carts")
        primary = PeriodicSchedule.objects.using("default").get(name="carts")
        assert primary.paused
        stale = PeriodicSchedule.objects.using("default").get(name="carts")
        stale.paused = False
        stale.save(using="replica", force_insert=True)
        admin_user = django_user_model.objects.create_superuser("root", "", "pw")
        client = Client()
        client.force_login(admin_user)
        answer = client.post(
            reverse("admin:django_delayq_periodicschedule_changelist"),
            {"action": "pause_schedules", "_selected_action": ["carts"]},
            follow=True,
        )
    text = answer.content.decode()
    assert "Paused 0 schedules" in text, text
    assert "1 was paused already." in text


def check_as_a_project_on(server: str, *options: str) -> Any:
    """``manage.py check OPTIONS`` of a project whose task rows are on ``server`` (a
    backend that says it is that server: tests/backends/mysql_vendor), in a
    process of its own; the other aliases on SQLite (Django's checks connect
    to each)."""
    import os
    import subprocess
    import sys

    from tests.acceptance.processes import ROOT

    return subprocess.run(
        [sys.executable, "-m", "django", "check", *options],
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings_mysql_vendor",
            "DELAYQ_FAKE_MYSQL": server,
            "DELAYQ_TEST_DB": "sqlite",
            "PYTHONPATH": str(ROOT),
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
