"""Rows written by an earlier version, during a deploy, after the new
version's ``migrate``: that version's INSERT names only the columns it
knows, and the database fills in the rest (upgrade policy, see
docs/guide/upgrading.md)."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.migrations.loader import MigrationLoader
from django.db.models import NOT_PROVIDED
from django.utils import timezone

from django_delayq.models import DelayedTask, Status
from tests.support.helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)

#: The columns added since the first release.
NEW_COLUMNS = ("claim_entry", "worker_ids", "priority")


def columns_of_the_first_release() -> list[str]:
    """The task table's columns as 0001_initial created them."""
    state = MigrationLoader(None).project_state(("django_delayq", "0001_initial"))
    model = state.apps.get_model("django_delayq", "DelayedTask")
    return [field.column for field in model._meta.concrete_fields]


def insert_as_the_first_release(task_id: uuid.UUID) -> None:
    now = timezone.now()
    values = {
        "id": task_id.hex if connection.vendor == "sqlite" else task_id,
        "name": "tests.testapp.tasks.add",
        "queue": "default",
        "shard": 0,
        "args": json.dumps([2, 3]),
        "kwargs": json.dumps({}),
        "key": None,
        "run_at": now - timedelta(seconds=1),
        "status": "scheduled",
        "attempts": 0,
        "max_attempts": 3,
        "created_at": now,
        "started_at": None,
        "finished_at": None,
        "result": None,
        "last_error": "",
        "last_traceback": "",
    }
    columns = columns_of_the_first_release()
    assert set(columns) == set(values)
    quoted = ", ".join(connection.ops.quote_name(c) for c in columns)
    marks = ", ".join(["%s"] * len(columns))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {DelayedTask._meta.db_table} ({quoted}) VALUES ({marks})",
            [values[c] for c in columns],
        )


def test_a_row_of_an_earlier_version_gets_the_new_columns_defaults(redis_client):
    task_id = uuid.uuid4()
    insert_as_the_first_release(task_id)

    row = DelayedTask.objects.get(pk=task_id)
    assert (row.priority, row.worker_ids, row.claim_entry) == (0, [], "")
    # A nullable column: NULL is "no metadata".
    assert row.meta is None
    # A nullable column with no default (0012): such a row never expires.
    assert row.expires_at is None


def test_a_row_of_an_earlier_version_runs(redis_client):
    task_id = uuid.uuid4()
    insert_as_the_first_release(task_id)
    # Its Redis write is lost with the old process in this test: the sweeper
    # indexes it, as it would after any lost write.
    call_command("delayq_sweep", once=True, verbosity=0)
    drain()

    row = DelayedTask.objects.get(pk=task_id)
    assert (row.status, row.result, len(row.worker_ids)) == (Status.SUCCEEDED, 5, 1)


def test_0007_gives_the_defaults_to_a_database_that_ran_the_first_0005(
    redis_client,
):
    """Databases that ran 0002, 0005 and 0006 before they had database
    defaults: played by removing the defaults, then 0007 run again."""
    fields = [DelayedTask._meta.get_field(name) for name in NEW_COLUMNS]
    with connection.schema_editor() as editor:
        for field in fields:
            without = field.clone()
            without.db_default = NOT_PROVIDED
            without.set_attributes_from_name(field.name)
            without.model = DelayedTask
            editor.alter_field(DelayedTask, field, without)
    try:
        with pytest.raises(IntegrityError), transaction.atomic():
            insert_as_the_first_release(uuid.uuid4())
    finally:
        call_command("migrate", "django_delayq", "0006", verbosity=0)
        call_command("migrate", "django_delayq", verbosity=0)

    task_id = uuid.uuid4()
    insert_as_the_first_release(task_id)
    row = DelayedTask.objects.get(pk=task_id)
    assert (row.priority, row.worker_ids, row.claim_entry) == (0, [], "")
