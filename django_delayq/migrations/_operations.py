"""Migration operations of django-delayq's own (a module the migration
loader skips: its name starts with an underscore)."""

from typing import Any

from django.db import migrations
from django.db.models import NOT_PROVIDED


LOCK_TIMEOUT = "10s"


class AddFieldWithLockTimeout(migrations.AddField):
    """``AddField``, which on PostgreSQL waits at most :data:`LOCK_TIMEOUT`
    for the table's lock.

    Adding a column changes the catalog only, but takes the table's
    exclusive lock: behind a long transaction on the table (a worker's group
    of long tasks), it would wait, and every ``schedule()`` with it. It fails
    with "lock timeout" instead, and ``migrate`` can be run again.
    """

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        super().database_forwards(app_label, schema_editor, from_state, to_state)


class SetDatabaseDefault(migrations.operations.base.Operation):
    """Give a column the database default its field declares, whatever the
    database has now (the migration state cannot tell: it already has it)."""

    reduces_to_sql = True
    reversible = True

    def __init__(self, model_name: str, name: str) -> None:
        self.model_name = model_name
        self.name = name

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (
            type(self).__name__,
            [],
            {"model_name": self.model_name, "name": self.name},
        )

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # the state has the default since 0002, 0005 and 0006

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        field = model._meta.get_field(self.name)
        without = field.clone()
        without.db_default = NOT_PROVIDED
        without.set_attributes_from_name(field.name)
        without.model = model
        schema_editor.alter_field(model, without, field)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        pass  # keeping a default breaks nothing

    def describe(self) -> str:
        return f"Set the database default of {self.model_name}.{self.name}"


#: The generated column that holds a task's dedupe key while it is active,
#: and the unique index over it (MySQL and MariaDB).
ACTIVE_KEY_COLUMN = "active_key"
ACTIVE_KEY_INDEX = "delayq_unique_active_key"


def binary_collation(connection: Any) -> str:
    """The collation under which keys compare byte for byte: "A" and "a",
    "e" and "é", "k" and "k " are different keys. MariaDB's ``utf8mb4_bin``
    ignores trailing spaces (PAD SPACE); its ``nopad`` twin does not, nor
    does MySQL 8's ``utf8mb4_0900_bin``."""
    return "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"


class EnforceActiveKeyOnMySQL(migrations.operations.base.Operation):
    """On MySQL and MariaDB, make the dedupe key unique among active tasks.

    Elsewhere the model's conditional unique constraint does it; MySQL has
    no conditional index (Django skips that constraint there). So a stored
    generated column holds the key while the task is scheduled or running,
    NULL otherwise, under a plain unique index (which admits any number of
    NULLs). The column is the database's alone: the model does not declare
    it, so no other database pays for it, and Django never writes it.

    The key column also gets a binary collation: the server's default
    (``utf8mb4_general_ci`` or ``_0900_ai_ci``) would make "A" and "a" one
    key, both for the index and for ``cancel(key=)`` (see
    :func:`binary_collation`). A later ``AlterField`` of the key must keep
    it (see :func:`key_column_sql`).

    An expand-only step: new columns and an index, no data rewritten by us
    (the server fills the generated column). It fails, naming the key, if
    two active tasks already share one, which is then for the operator to
    settle before migrating.
    """

    reduces_to_sql = True
    reversible = True

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (type(self).__name__, [], {"model_name": self.model_name})

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # the model does not declare the column (see the docstring)

    def _model_here(self, app_label: str, schema_editor: Any, state: Any) -> Any:
        """The model, if this database is MySQL or MariaDB and has it."""
        model = state.apps.get_model(app_label, self.model_name)
        connection = schema_editor.connection
        if connection.vendor != "mysql":
            return None
        if not self.allow_migrate_model(connection.alias, model):
            return None
        return model

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        model = self._model_here(app_label, schema_editor, to_state)
        if model is None:
            return
        connection = schema_editor.connection
        quote = schema_editor.quote_name
        table = quote(model._meta.db_table)
        key = model._meta.get_field("key")
        status = quote(model._meta.get_field("status").column)
        duplicate = self._duplicate_active_key(schema_editor, model)
        if duplicate is not None:
            raise ValueError(
                f"Two active tasks hold the dedupe key {duplicate!r}: cancel one "
                f"of them (e.g. in the admin) before this migration, which makes "
                f"a key unique among active tasks on {connection.display_name}."
            )
        schema_editor.execute(
            f"ALTER TABLE {table} "
            f"MODIFY {key_column_sql(schema_editor, key)}, "
            f"ADD COLUMN {quote(ACTIVE_KEY_COLUMN)} varchar({key.max_length}) "
            f"CHARACTER SET utf8mb4 COLLATE {binary_collation(connection)} "
            f"AS (CASE WHEN {status} IN ('scheduled', 'running') "
            f"THEN {quote(key.column)} END) STORED, "
            f"ADD CONSTRAINT {quote(ACTIVE_KEY_INDEX)} "
            f"UNIQUE ({quote(ACTIVE_KEY_COLUMN)})"
        )

    def _duplicate_active_key(self, schema_editor: Any, model: Any) -> str | None:
        quote = schema_editor.quote_name
        key = quote(model._meta.get_field("key").column)
        status = quote(model._meta.get_field("status").column)
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {key} FROM {quote(model._meta.db_table)} "
                f"WHERE {status} IN ('scheduled', 'running') AND {key} IS NOT NULL "
                f"GROUP BY BINARY {key} HAVING COUNT(*) > 1 LIMIT 1"
            )
            found = cursor.fetchone()
        return None if found is None else str(found[0])

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        model = self._model_here(app_label, schema_editor, from_state)
        if model is None:
            return
        quote = schema_editor.quote_name
        schema_editor.execute(
            f"ALTER TABLE {quote(model._meta.db_table)} "
            f"DROP INDEX {quote(ACTIVE_KEY_INDEX)}, "
            f"DROP COLUMN {quote(ACTIVE_KEY_COLUMN)}"
        )

    def describe(self) -> str:
        return (
            f"Make {self.model_name}.key unique among active tasks on MySQL and "
            "MariaDB (a generated column under a unique index)"
        )


def key_column_sql(schema_editor: Any, field: Any) -> str:
    """The definition of the dedupe key column on MySQL: the field's own,
    with the binary collation."""
    return (
        f"{schema_editor.quote_name(field.column)} varchar({field.max_length}) "
        f"CHARACTER SET utf8mb4 COLLATE {binary_collation(schema_editor.connection)} "
        f"{'NULL' if field.null else 'NOT NULL'}"
    )
