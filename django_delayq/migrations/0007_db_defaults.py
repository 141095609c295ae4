"""Database defaults for the columns 0002, 0005 and 0006 added.

Those migrations first gave their columns defaults in Python only, so during
a deploy (``migrate`` first, then the processes restart) every
``schedule()`` of a process still running the earlier version, which
inserts rows without them, was refused with a NOT NULL violation. They now
add each column with its database default in the same statement; this
migration gives the default to databases that ran them before, and is
harmless where the default is there already. On PostgreSQL it changes the
catalog only (no table rewrite, no long lock).
"""

from typing import Any

from django.db import migrations
from django.db.models import NOT_PROVIDED


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


class Migration(migrations.Migration):
    dependencies = [
        ("django_delayq", "0006_priority"),
    ]

    operations = [
        SetDatabaseDefault("delayedtask", "claim_entry"),
        SetDatabaseDefault("delayedtask", "worker_ids"),
        SetDatabaseDefault("delayedtask", "priority"),
    ]
