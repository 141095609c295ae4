"""Migration operations of django-delayq's own (a module the migration
loader skips: its name starts with an underscore)."""

from typing import Any

from django.db import migrations
from django.db.models import NOT_PROVIDED


LOCK_TIMEOUT = "10s"


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
