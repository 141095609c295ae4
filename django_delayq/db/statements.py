"""Hand-written SQL for the worker's hot statements, built once per database.

The ORM builds a statement anew on every call; a worker runs the same few
statements thousands of times a second, so their text is built once per
(database vendor, statement, shape) and cached here. Only
:mod:`django_delayq.transitions` uses these: they are the batch forms of its
state changes.

Values go through the fields' own ``get_db_prep_save()``, so a UUID, a
datetime or a JSON value is stored exactly as the ORM would store it.

On PostgreSQL the batch statements take their rows as arrays
(``UPDATE ... FROM unnest(...)``): a fixed, short text whatever the batch
size, which the driver converts once and caches, where a ``CASE`` with a
branch per row was parsed anew on every call (an eighth of a worker's time).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import connections
from django.db.models import Field

from ..models import DelayedTask
from ..payload import encode_json


@functools.cache
def _field(name: str) -> Field[Any, Any]:
    found = DelayedTask._meta.get_field(name)
    assert isinstance(found, Field)
    return found


def column(name: str, connection: Any) -> str:
    """The quoted column of the field ``name``."""
    db_column = _field(name).column
    assert db_column is not None
    return str(connection.ops.quote_name(db_column))


def prep(name: str, value: Any, connection: Any) -> Any:
    """``value`` as the field ``name`` sends it to the database."""
    return _field(name).get_db_prep_save(value, connection)


def _table(connection: Any) -> str:
    return str(connection.ops.quote_name(DelayedTask._meta.db_table))


#: Statement text by (database vendor, statement, shape).
_cache: dict[tuple[Any, ...], str] = {}


def _cached(connection: Any, key: tuple[Any, ...], build: Callable[[], str]) -> str:
    cache_key = (connection.vendor, *key)
    sql = _cache.get(cache_key)
    if sql is None:
        sql = _cache[cache_key] = build()
    return sql


def can_return_rows(using: str) -> bool:
    """Whether :func:`claim_due` can claim many rows at once: PostgreSQL and
    SQLite from 3.35 return them from the UPDATE; MySQL and MariaDB (which
    return rows from an INSERT only) read them back."""
    connection = connections[using]
    if connection.vendor == "mysql":
        return True
    return connection.vendor in ("postgresql", "sqlite") and bool(
        connection.features.can_return_columns_from_insert
    )


def claim_due(
    claims: Sequence[tuple[Any, str]], now: Any, worker: str, using: str
) -> list[DelayedTask]:
    """``scheduled -> running`` for every due row among ``claims``, in one
    ``UPDATE ... RETURNING``; return the rows claimed.

    ``claims`` pairs a task id with the stream entry that delivers it: each
    claimed row records its own entry (``claim_entry``), which fences the
    attempt's outcome. Rows that are not scheduled, or not due by ``now``,
    are left alone and not returned. ``worker`` is appended to each claimed
    row's ``worker_ids``. The caller checks :func:`can_return_rows` first.
    """
    connection = connections[using]
    moment = prep("started_at", now, connection)
    if connection.vendor == "postgresql":
        sql = _cached(connection, ("claim",), lambda: _claim_sql_pg(connection))
        ids = [prep("id", task_id, connection) for task_id, _ in claims]
        pg_params = [
            "running",
            moment,
            worker,
            [entry for _, entry in claims],
            ids,
            ids,
            "scheduled",
            moment,
        ]
        return list(DelayedTask.objects.using(using).raw(sql, pg_params))
    if connection.vendor == "mysql":
        return _claim_due_mysql(claims, now, worker, using)
    n = len(claims)
    sql = _cached(connection, ("claim", n), lambda: _claim_sql(connection, n))
    params = _claim_params(claims, moment, worker, connection)
    # raw() applies the fields' from-database conversions (JSON, datetimes).
    return list(DelayedTask.objects.using(using).raw(sql, params))


def _claim_params(
    claims: Sequence[tuple[Any, str]], moment: Any, worker: str, connection: Any
) -> list[Any]:
    """The parameters of the claim statements that take one ``WHEN`` per row
    (all but PostgreSQL's)."""
    ids = [prep("id", task_id, connection) for task_id, _ in claims]
    params: list[Any] = ["running", moment, worker]
    for task_id, entry_id in zip(ids, (entry for _, entry in claims), strict=True):
        params += [task_id, entry_id]
    return [*params, *ids, "scheduled", moment]


def _claim_due_mysql(
    claims: Sequence[tuple[Any, str]], now: Any, worker: str, using: str
) -> list[DelayedTask]:
    """The claim on MySQL and MariaDB: the same UPDATE, then the rows read
    back by primary key. A row is ours if it carries this claim's entry and
    moment: an earlier claim by the same entry (redelivered after its worker
    died) has another moment, and a row the UPDATE left alone keeps its
    values. A row claimed here but changed before the read (only a takeover,
    after the visibility timeout, can) is not returned, and the caller
    decides it one by one, as any other."""
    connection = connections[using]
    moment = prep("started_at", now, connection)
    n = len(claims)
    sql = _cached(connection, ("claim", n), lambda: _claim_sql_mysql(connection, n))
    with connection.cursor() as cursor:
        cursor.execute(sql, _claim_params(claims, moment, worker, connection))
        if not cursor.rowcount:
            return []
    entries = dict(claims)
    rows = DelayedTask.objects.using(using).filter(
        pk__in=[task_id for task_id, _ in claims], status="running"
    )
    return [
        row
        for row in rows
        if row.claim_entry == entries.get(row.pk) and row.started_at == now
    ]


def _claim_sql_mysql(connection: Any, n: int) -> str:
    status, attempts, started_at, claim_entry, pk, run_at, workers = _columns(
        connection, _CLAIM_COLUMNS
    )
    entries = " ".join(["WHEN %s THEN %s"] * n)
    placeholders = ", ".join(["%s"] * n)
    return (
        f"UPDATE {_table(connection)} SET {status} = %s, "
        f"{attempts} = {attempts} + 1, {started_at} = %s, "
        f"{workers} = JSON_ARRAY_APPEND({workers}, '$', %s), "
        f"{claim_entry} = CASE {pk} {entries} END "
        f"WHERE {pk} IN ({placeholders}) AND {status} = %s AND {run_at} <= %s"
    )


# Every claim statement here picks its rows with ``status = 'scheduled' AND
# run_at <= now``: models.due_by(now), the condition of
# DelayedTask.objects.due(by=now) and of the one-row claim
# (transitions.claim), written by hand. A change to one is a change to all.

#: The columns a claim reads or writes, in the order the claim SQL unpacks.
_CLAIM_COLUMNS = (
    "status",
    "attempts",
    "started_at",
    "claim_entry",
    "id",
    "run_at",
    "worker_ids",
)


def _columns(connection: Any, names: Sequence[str]) -> list[str]:
    return [column(name, connection) for name in names]


def _claim_sql(connection: Any, n: int) -> str:
    status, attempts, started_at, claim_entry, pk, run_at, workers = _columns(
        connection, _CLAIM_COLUMNS
    )
    returning = _returning(connection)
    entries = " ".join(["WHEN %s THEN %s"] * n)
    placeholders = ", ".join(["%s"] * n)
    return (
        f"UPDATE {_table(connection)} SET {status} = %s, "
        f"{attempts} = {attempts} + 1, {started_at} = %s, "
        # SQLite's JSON1 (built in since 3.38): append to the array.
        f"{workers} = json_insert({workers}, '$[#]', %s), "
        f"{claim_entry} = CASE {pk} {entries} END "
        f"WHERE {pk} IN ({placeholders}) AND {status} = %s AND {run_at} <= %s "
        f"RETURNING {returning}"
    )


def _returning(connection: Any, alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    return ", ".join(
        prefix + column(f.name, connection) for f in DelayedTask._meta.concrete_fields
    )


def _claim_sql_pg(connection: Any) -> str:
    status, attempts, started_at, claim_entry, pk, run_at, workers = _columns(
        connection, _CLAIM_COLUMNS
    )
    # Two entries may deliver one task: the row is updated once, with one of
    # them, and the caller reads which from the returned claim_entry.
    # The rows are found by primary key alone, and each one's entry is looked
    # up in the array rather than joined (see _unindexed).
    return (
        f"UPDATE {_table(connection)} AS t SET {status} = %s, "
        f"{attempts} = t.{attempts} + 1, {started_at} = %s, "
        f"{workers} = t.{workers} || jsonb_build_array(%s::text), "
        f"{claim_entry} = (%s::text[])[array_position(%s::uuid[], t.{pk})] "
        f"WHERE t.{pk} = ANY(%s::uuid[]) "
        f"AND {_unindexed(f't.{status} = %s AND t.{run_at} <= %s')} "
        f"RETURNING {_returning(connection, 't')}"
    )


def _unindexed(condition: str) -> str:
    """``condition`` in a form no index can serve, for statements that name
    their rows by primary key: the planner then reads them by it.

    Otherwise statistics taken while the table was small (a new deployment,
    a table that grew since autovacuum's last ANALYZE) lead PostgreSQL to
    read every scheduled row through the status index for each claim,
    joined to the claimed ids: 29 ms to claim 39 tasks among 200,000
    scheduled, 340 ms for 500, instead of 1 ms and 6 ms. ``IS TRUE`` changes
    nothing else (the columns are never NULL), and a row updated meanwhile
    is checked against it again, as against any condition on the updated
    table.
    """
    return f"({condition}) IS TRUE"


def update_attempt(
    task_id: Any, attempt: int, claim_entry: str, values: dict[str, Any], using: str
) -> bool:
    """Set ``values`` on a running task if ``attempt``, claimed by the stream
    entry ``claim_entry``, is still its attempt; True if the row was updated.

    ``values`` maps field names to Python values.
    """
    connection = connections[using]
    sql = _cached(
        connection, ("update", *values), lambda: _update_sql(connection, values)
    )
    params = [prep(name, value, connection) for name, value in values.items()]
    params += [prep("id", task_id, connection), "running", attempt, claim_entry]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return bool(cursor.rowcount)


def _update_sql(connection: Any, names: Iterable[str]) -> str:
    assignments = ", ".join(f"{column(name, connection)} = %s" for name in names)
    return (
        f"UPDATE {_table(connection)} SET {assignments} "
        f"WHERE {column('id', connection)} = %s "
        f"AND {column('status', connection)} = %s "
        f"AND {column('attempts', connection)} = %s "
        f"AND {column('claim_entry', connection)} = %s"
    )


def succeed_many(
    successes: Sequence[tuple[Any, int, str, Any, Any]], now: Any, using: str
) -> int:
    """``running -> succeeded`` for many attempts in one statement.

    Each of ``successes`` is ``(task id, attempt, claim_entry, started_at,
    result)``; a row is updated only while that attempt, claimed by that
    entry, is still its attempt (the outcome fence). Returns how many rows
    were updated: fewer than given means some attempt was taken over.
    """
    connection = connections[using]
    if connection.vendor == "postgresql":
        return _succeed_many_pg(successes, now, connection)
    n = len(successes)
    with_results = any(result is not None for *_, result in successes)
    sql = _cached(
        connection,
        ("succeed", n, with_results),
        lambda: _succeed_sql(connection, n, with_results),
    )
    ids = [prep("id", task_id, connection) for task_id, *_ in successes]
    params: list[Any] = ["succeeded", prep("finished_at", now, connection)]
    for task_id, (*_, started_at, _result) in zip(ids, successes, strict=True):
        params += [task_id, prep("started_at", started_at, connection)]
    if with_results:
        for task_id, (*_, result) in zip(ids, successes, strict=True):
            params += [task_id, prep("result", result, connection)]
    params += ids
    for task_id, (_, attempt, claim_entry, *_) in zip(ids, successes, strict=True):
        params += [task_id, attempt, claim_entry]
    params.append("running")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def _succeed_many_pg(
    successes: Sequence[tuple[Any, int, str, Any, Any]], now: Any, connection: Any
) -> int:
    sql = _cached(connection, ("succeed",), lambda: _succeed_sql_pg(connection))
    ids = [task_id for task_id, *_ in successes]
    params = [
        "succeeded",
        now,
        ids,
        [attempt for _, attempt, *_ in successes],
        [claim_entry for _, _, claim_entry, *_ in successes],
        [started for *_, started, _ in successes],
        # As JSON text, cast back to jsonb by the statement; None is NULL.
        [None if result is None else encode_json(result) for *_, result in successes],
        ids,
        "running",
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def _succeed_sql_pg(connection: Any) -> str:
    pk, status, attempts, claim_entry = (
        column(name, connection) for name in ("id", "status", "attempts", "claim_entry")
    )
    return (
        f"UPDATE {_table(connection)} AS t SET {status} = %s, "
        f"{column('finished_at', connection)} = %s, "
        f"{column('started_at', connection)} = v.started, "
        f"{column('result', connection)} = v.result::jsonb, "
        f"{column('last_error', connection)} = '', "
        f"{column('last_traceback', connection)} = '' "
        f"FROM unnest(%s::uuid[], %s::integer[], %s::text[], %s::timestamptz[], "
        f"%s::text[]) AS v(id, attempts, entry, started, result) "
        f"WHERE t.{pk} = ANY(%s::uuid[]) AND t.{pk} = v.id "
        f"AND t.{attempts} = v.attempts AND t.{claim_entry} = v.entry "
        f"AND {_unindexed(f't.{status} = %s')}"
    )


def _succeed_sql(connection: Any, n: int, with_results: bool) -> str:
    pk, status, attempts, claim_entry = (
        column(name, connection) for name in ("id", "status", "attempts", "claim_entry")
    )
    whens = " ".join(["WHEN %s THEN %s"] * n)
    if with_results:
        result = f"CASE {pk} {whens} END"
        if connection.vendor == "postgresql":
            # A CASE whose branches include untyped NULLs is text to
            # PostgreSQL; the column is jsonb.
            result = f"CAST({result} AS {_field('result').db_type(connection)})"
    else:
        result = "NULL"
    placeholders = ", ".join(["%s"] * n)
    fences = ", ".join(["(%s, %s, %s)"] * n)
    return (
        f"UPDATE {_table(connection)} SET {status} = %s, "
        f"{column('finished_at', connection)} = %s, "
        f"{column('started_at', connection)} = CASE {pk} {whens} END, "
        f"{column('result', connection)} = {result}, "
        f"{column('last_error', connection)} = '', "
        f"{column('last_traceback', connection)} = '' "
        # The id list lets the database find the rows by primary key; the
        # row-value list is the fence.
        f"WHERE {pk} IN ({placeholders}) "
        f"AND ({pk}, {attempts}, {claim_entry}) IN ({fences}) AND {status} = %s"
    )
