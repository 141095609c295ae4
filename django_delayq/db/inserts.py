"""Building task rows quickly and inserting many of them in few statements.

``schedule_many()`` spends its time here: per call, the model instance, and
per batch, the INSERT. Django's ``Model(**kwargs)`` and ``bulk_create()`` are
general and correspondingly slow (defaults resolved per field, one adapted
parameter per value); a bulk schedule knows every column up front, so:

* instances are built from a dict of every field's value, skipping the
  per-field default lookups of ``Model(**kwargs)`` (when nobody listens to
  ``pre_init``/``post_init`` for the model; otherwise through ``__init__``);
* on PostgreSQL with psycopg 3 the rows go in through ``COPY ... FROM STDIN``,
  several times faster than a multi-row INSERT; constraints (the active-key
  unique index) are checked as for an INSERT, and the statement joins the
  caller's transaction;
* elsewhere ``bulk_create()`` does the work.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from ..models import DelayedTask
from ..payload import encode_json

#: Rows per COPY statement: bounds the client-side buffer, not the speed.
COPY_BATCH = 5_000
#: Rows per INSERT elsewhere (SQLite allows 32,766 parameters per statement).
INSERT_BATCH = 1_000


@functools.cache
def _attnames() -> tuple[str, ...]:
    return tuple(field.attname for field in DelayedTask._meta.concrete_fields)


def plain_rows() -> bool:
    """Whether rows may be built without ``__init__``: nobody listens to
    ``pre_init``/``post_init`` for the model."""
    return not (
        pre_init.has_listeners(DelayedTask) or post_init.has_listeners(DelayedTask)
    )


def new_row(values: dict[str, Any], *, plain: bool | None = None) -> DelayedTask:
    """Return an unsaved :class:`DelayedTask` with every field given in ``values``.

    ``values`` maps each concrete field's attname to its value. The model's
    fields are plain columns (no relations, no descriptors that act on
    assignment), so the instance ``__init__`` would build is exactly a fresh
    ``ModelState`` plus these attributes. ``plain`` is :func:`plain_rows`,
    if the caller asked it already (once for many rows).
    """
    if not (plain_rows() if plain is None else plain):
        positional: list[Any] = [values[name] for name in _attnames()]
        return DelayedTask(*positional)  # type: ignore[misc]
    row = DelayedTask.__new__(DelayedTask)
    row.__dict__.update(values)
    row._state = ModelState()
    return row


def insert_rows(tasks: Sequence[DelayedTask], using: str) -> None:
    """INSERT ``tasks`` (unsaved, every field set) in the current transaction.

    Raises Django's ``IntegrityError`` on a constraint violation, as
    ``bulk_create()`` does, whichever path is taken.
    """
    connection = connections[using]
    if connection.vendor == "postgresql" and _has_copy(connection):
        _copy(tasks, connection)
    else:
        DelayedTask.objects.using(using).bulk_create(tasks, batch_size=INSERT_BATCH)
    for task in tasks:
        task._state.adding = False
        task._state.db = using


def _has_copy(connection: Any) -> bool:
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def _copy(tasks: Sequence[DelayedTask], connection: Any) -> None:
    fields = DelayedTask._meta.concrete_fields
    json_columns = {
        position
        for position, field in enumerate(fields)
        if field.get_internal_type() == "JSONField"
    }
    table = connection.ops.quote_name(DelayedTask._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
    statement = f"COPY {table} ({columns}) FROM STDIN"
    names = _attnames()
    with connection.cursor() as cursor, connection.wrap_database_errors:
        for start in range(0, len(tasks), COPY_BATCH):
            # One COPY per batch: psycopg buffers the rows client-side until
            # the block ends.
            with cursor.cursor.copy(statement) as copy:
                for task in tasks[start : start + COPY_BATCH]:
                    values = task.__dict__
                    row = [values[name] for name in names]
                    for position in json_columns:
                        value = row[position]
                        if value is not None:
                            row[position] = _EMPTY_JSON.get(
                                (type(value), len(value))
                                if type(value) in (list, dict)
                                else None
                            ) or encode_json(value)
                    copy.write_row(row)


#: The JSON of the empty values most rows hold (no kwargs, no workers yet),
#: written without encoding each one.
_EMPTY_JSON: dict[tuple[type, int] | None, str] = {(list, 0): "[]", (dict, 0): "{}"}
