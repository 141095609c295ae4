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
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connections
from django.db.models import Field
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from .models import DelayedTask
from .payload import encode_json

#: Rows per COPY statement: bounds the client-side buffer, not the speed.
COPY_BATCH = 5_000
#: Rows per INSERT elsewhere (SQLite allows 32,766 parameters per statement).
INSERT_BATCH = 1_000


@functools.cache
def _attnames() -> tuple[str, ...]:
    return tuple(field.attname for field in DelayedTask._meta.concrete_fields)


def new_row(values: dict[str, Any]) -> DelayedTask:
    """Return an unsaved :class:`DelayedTask` with every field given in ``values``.

    ``values`` maps each concrete field's attname to its value. The model's
    fields are plain columns (no relations, no descriptors that act on
    assignment), so the instance ``__init__`` would build is exactly a fresh
    ``ModelState`` plus these attributes.
    """
    if pre_init.has_listeners(DelayedTask) or post_init.has_listeners(DelayedTask):
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
                        if row[position] is not None:
                            row[position] = encode_json(row[position])
                    copy.write_row(row)


def _field(name: str) -> Field[Any, Any]:
    found = DelayedTask._meta.get_field(name)
    assert isinstance(found, Field)
    return found


def _column(name: str, connection: Any) -> str:
    column = _field(name).column
    assert column is not None
    return str(connection.ops.quote_name(column))


def _prep(name: str, value: Any, connection: Any) -> Any:
    return _field(name).get_db_prep_save(value, connection)


#: Statement text by (database vendor, statement, columns): built once, not
#: for every task a worker runs.
_statements: dict[tuple[str, ...], str] = {}


def _statement(connection: Any, key: tuple[str, ...], build: Any) -> str:
    cache_key = (connection.vendor, *key)
    sql = _statements.get(cache_key)
    if sql is None:
        sql = _statements[cache_key] = build()
    return sql


def claim_due(task_id: Any, entry_id: str, now: Any, using: str) -> DelayedTask | None:
    """Claim a scheduled, due task and return its row, in one round trip.

    ``UPDATE ... RETURNING``: the row moves ``scheduled -> running`` with
    ``attempts + 1`` only if it is scheduled and due by ``now``, exactly the
    fence of the two-step claim (read, then conditional UPDATE), which stays
    the path for everything else (early, running, finished rows). Returns
    None when nothing was claimed, or when the database cannot return rows
    from an UPDATE (SQLite before 3.35).
    """
    connection = connections[using]
    if not connection.features.can_return_columns_from_insert:
        return None
    sql = _statement(connection, ("claim",), lambda: _claim_sql(connection))
    moment = _prep("started_at", now, connection)
    params = [
        "running",
        moment,
        entry_id,
        _prep("id", task_id, connection),
        "scheduled",
        moment,
    ]
    # raw() applies the fields' from-database conversions (JSON, datetimes).
    return next(iter(DelayedTask.objects.using(using).raw(sql, params)), None)


def _claim_sql(connection: Any) -> str:
    meta = DelayedTask._meta
    status, attempts, started_at, claim_entry, pk, run_at = (
        _column(name, connection)
        for name in ("status", "attempts", "started_at", "claim_entry", "id", "run_at")
    )
    returning = ", ".join(_column(f.name, connection) for f in meta.concrete_fields)
    return (
        f"UPDATE {connection.ops.quote_name(meta.db_table)} SET {status} = %s, "
        f"{attempts} = {attempts} + 1, {started_at} = %s, {claim_entry} = %s "
        f"WHERE {pk} = %s AND {status} = %s AND {run_at} <= %s "
        f"RETURNING {returning}"
    )


def update_attempt(
    task_id: Any, attempt: int, claim_entry: str, values: dict[str, Any], using: str
) -> bool:
    """Set ``values`` on a running task if ``attempt``, claimed by the stream
    entry ``claim_entry``, is still its attempt.

    The outcome fence of every attempt, as one prepared UPDATE: ``values``
    maps field names to Python values. True if the row was updated.
    """
    connection = connections[using]
    sql = _statement(
        connection, ("update", *values), lambda: _update_sql(connection, values)
    )
    params = [_prep(name, value, connection) for name, value in values.items()]
    params += [_prep("id", task_id, connection), "running", attempt, claim_entry]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return bool(cursor.rowcount)


def _update_sql(connection: Any, names: Iterable[str]) -> str:
    assignments = ", ".join(f"{_column(name, connection)} = %s" for name in names)
    return (
        f"UPDATE {connection.ops.quote_name(DelayedTask._meta.db_table)} "
        f"SET {assignments} WHERE {_column('id', connection)} = %s "
        f"AND {_column('status', connection)} = %s "
        f"AND {_column('attempts', connection)} = %s "
        f"AND {_column('claim_entry', connection)} = %s"
    )
