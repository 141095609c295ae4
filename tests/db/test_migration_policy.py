"""The migrations keep the upgrade policy (docs/guide/upgrading.md).

During a deploy the previous release keeps running against a database that
the new release's ``migrate`` already changed, so a migration may only
expand the schema: a new column is nullable or has a database default, no
column or table is renamed or dropped in the release that stops using it
(that waits for a later release), no column becomes stricter, and an index
on an existing table is built concurrently on PostgreSQL (a plain
``CREATE INDEX`` blocks every ``schedule()`` while it builds).
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.postgres.operations import AddIndexConcurrently
from django.core.management import call_command
from django.db import connection, migrations
from django.db.migrations.loader import MigrationLoader
from django.db.models import NOT_PROVIDED, Field

from django_delayq.migrations._operations import (
    LOCK_TIMEOUT,
    EnforceActiveKeyOnMySQL,
    SetDatabaseDefault,
)

APP = "django_delayq"

#: What earlier migrations did before the policy: 0004 builds its index with
#: a plain CREATE INDEX, which the upgrading guide tells the operator of a
#: large table to build beforehand. (0002, 0005 and 0006 added their columns
#: with defaults in Python only; they now add them with database defaults,
#: and 0007 sets those where the earlier versions of them ran.)
GRANDFATHERED = {
    ("0004_key_index", "AddIndex delayq_key"),
}

#: Attributes an AlterField may change: they live in Python or in the
#: column's default, which the previous release does not depend on.
HARMLESS = {"default", "db_default", "help_text", "verbose_name", "blank", "choices"}

#: Operations whose every use keeps the policy: a new table, options that
#: live in Python, a concurrent index, 0007's database defaults, and 0009's
#: generated column on MySQL and MariaDB (computed by the server, so the
#: previous release's inserts need not name it; it rebuilds the table there,
#: which no earlier release supported, so it is empty or nearly).
REVIEWED = (
    migrations.CreateModel,
    migrations.AlterModelOptions,
    AddIndexConcurrently,
    SetDatabaseDefault,
    EnforceActiveKeyOnMySQL,
)

REMOVALS = (
    migrations.RemoveField,
    migrations.RenameField,
    migrations.DeleteModel,
    migrations.RenameModel,
    migrations.RemoveConstraint,
)


def field_breaks_old_inserts(field: Field[Any, Any]) -> bool:
    return (
        not field.null
        and field.db_default is NOT_PROVIDED
        and not getattr(field, "primary_key", False)
    )


def attributes(field: Field[Any, Any]) -> dict[str, Any]:
    _, _, _, kwargs = field.deconstruct()
    return {k: v for k, v in kwargs.items() if k not in HARMLESS}


def problems_of(loader: MigrationLoader, name: str) -> list[tuple[str, str]]:
    migration = loader.disk_migrations[(APP, name)]
    before = loader.project_state((APP, name), at_end=False)
    found = []
    for op in migration.operations:
        if isinstance(op, migrations.AddField):
            if field_breaks_old_inserts(op.field):
                found.append(f"AddField {op.name}")
            elif op.field.db_index or op.field.unique:
                found.append(f"AddField {op.name} with an index")
        elif isinstance(op, REMOVALS):
            found.append(f"{type(op).__name__} {getattr(op, 'name', '')}".strip())
        elif isinstance(op, migrations.AlterField):
            old = before.models[APP, op.model_name_lower].fields[op.name]
            if attributes(old) != attributes(op.field):
                found.append(f"AlterField {op.name} changes the column")
            elif field_breaks_old_inserts(op.field) and not field_breaks_old_inserts(
                old
            ):
                found.append(f"AlterField {op.name} drops the database default")
        elif isinstance(
            op, migrations.AddIndex | migrations.AddConstraint
        ) and not isinstance(op, AddIndexConcurrently):
            label = getattr(op, "index", None) or getattr(op, "constraint", None)
            found.append(f"{type(op).__name__} {label.name}")  # type: ignore[union-attr]
        elif not isinstance(op, REVIEWED):
            # RunSQL, RunPython, a table renamed...: not allowed until a
            # rule above says what makes it safe.
            found.append(f"{type(op).__name__} is not one the policy knows")
    return [(name, problem) for problem in found]


def our_migrations(loader: MigrationLoader) -> list[str]:
    return sorted(name for app, name in loader.disk_migrations if app == APP)


@pytest.fixture(scope="module")
def loader() -> MigrationLoader:
    return MigrationLoader(None, ignore_no_migrations=True)


def test_every_migration_keeps_the_policy(loader):
    found = {p for name in our_migrations(loader) for p in problems_of(loader, name)}
    assert found == GRANDFATHERED


def test_the_check_finds_what_breaks_the_previous_release(loader):
    """Each rule, on a migration that breaks it (built here, not on disk)."""
    from django.db import models

    name = our_migrations(loader)[-1]
    migration = loader.disk_migrations[(APP, name)]
    kept = migration.operations
    try:
        migration.operations = [
            migrations.AddField(
                "delayedtask", "flag", models.BooleanField(default=False)
            ),
            migrations.AddField("delayedtask", "note", models.TextField(null=True)),
            migrations.RemoveField("delayedtask", "claim_entry"),
            migrations.RenameField("delayedtask", "key", "dedupe_key"),
            migrations.AddIndex(
                "delayedtask", models.Index(fields=["queue"], name="delayq_queue")
            ),
            AddIndexConcurrently(
                "delayedtask", models.Index(fields=["shard"], name="delayq_shard")
            ),
            migrations.AlterField(
                "delayedtask", "last_error", models.CharField(max_length=100)
            ),
            migrations.RunSQL("UPDATE django_delayq_delayedtask SET queue = 'x'"),
        ]
        found = [problem for _, problem in problems_of(loader, name)]
    finally:
        migration.operations = kept
    assert found == [
        "AddField flag",
        "RemoveField claim_entry",
        "RenameField key",
        "AddIndex delayq_queue",
        "AlterField last_error changes the column",
        "RunSQL is not one the policy knows",
    ]


@pytest.mark.django_db
def test_the_metadata_column_waits_briefly_for_the_tables_lock(loader):
    """On PostgreSQL its ALTER TABLE gives up after LOCK_TIMEOUT rather than
    queue every schedule() behind a long transaction on the table."""
    if connection.vendor != "postgresql":
        pytest.skip("lock_timeout is PostgreSQL's")
    [name] = [
        name
        for name in our_migrations(loader)
        for op in loader.disk_migrations[(APP, name)].operations
        if isinstance(op, migrations.AddField) and op.name == "meta"
    ]
    sql = io.StringIO()
    call_command("sqlmigrate", APP, name, stdout=sql)
    statements = [line for line in sql.getvalue().splitlines() if line[:1].isupper()]
    assert statements[1:3] == [
        f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}';",
        'ALTER TABLE "django_delayq_delayedtask" ADD COLUMN "meta" jsonb NULL;',
    ]
