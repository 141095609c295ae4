"""Lookups by dedupe key read the key's rows through an index, on every database.

A table scan here costs milliseconds per call at 100,000 scheduled rows, which
is easy to miss with the few rows of a test; so the test asks each database
how it would run the statements ``cancel(key=)``, ``reschedule(key=)`` and a
duplicate ``schedule_many()`` send, with the parameters they sent.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from django_delayq import Call, cancel, reschedule, schedule, schedule_many
from django_delayq.exceptions import DuplicateTask
from django_delayq.models import DelayedTask, Status
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = "django_delayq_delayedtask"


@contextmanager
def statements_on_key() -> Iterator[list[tuple[str, Any]]]:
    """Record the SELECTs and UPDATEs that filter the task table by key."""
    seen: list[tuple[str, Any]] = []

    key = connection.ops.quote_name("key")

    def record(execute: Callable[..., Any], sql: str, params: Any, *rest: Any) -> Any:
        if TABLE in sql and key in sql.partition("WHERE")[2]:
            seen.append((sql, params))
        return execute(sql, params, *rest)

    with connection.execute_wrapper(record):
        yield seen


def plan(sql: str, params: Any) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # The statistics of the rows this test made, not those autovacuum
            # took of an earlier test's rows (which can price the status
            # index below the key's).
            cursor.execute(f"ANALYZE {TABLE}")
            # Too few rows for the planner to prefer an index on its own;
            # with sequential scans priced out, it still scans only when
            # there is no index to use.
            cursor.execute("SET enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
            cursor_plan = "\n".join(row[0] for row in cursor.fetchall())
            cursor.execute("RESET enable_seqscan")
            return cursor_plan
        if connection.vendor == "mysql":
            # InnoDB computes a new table's statistics in the background, a
            # while after its rows came; a table in use has them.
            cursor.execute(f"ANALYZE TABLE {TABLE}")
            cursor.fetchall()
            # One row per table read: its access type and the index used.
            cursor.execute(f"EXPLAIN {sql}", params)
            names = [column[0] for column in cursor.description]
            return "\n".join(
                f"type={row['type']} key={row['key']} ref={row['ref']}"
                for row in (dict(zip(names, found, strict=True)) for found in cursor)
            )
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


def broad_reads(statements: list[tuple[str, Any]]) -> list[str]:
    """The plans that read more than the key's rows: a scan of the table, or
    an index searched by status alone (every scheduled row)."""
    plans = [plan(sql, params) for sql, params in statements]
    assert plans, "no statement filtered the task table by key"
    return [p for p in plans if _broad(p)]


def _broad(query_plan: str) -> bool:
    if connection.vendor == "mysql":
        # "ALL" is a table scan; an index on (status, ...) searched by one
        # constant is searched by status alone.
        return any(
            "type=ALL" in line
            or (re.search(r"key=delayq_status\w* ref=const$", line) is not None)
            for line in query_plan.splitlines()
        )
    if connection.vendor == "postgresql":
        conditions = re.findall(r"Index Cond: (.*)", query_plan)
        return (
            "Seq Scan" in query_plan
            or not conditions
            or all(
                "status" in c and "key" not in c and "_at" not in c for c in conditions
            )
        )
    searches = re.findall(
        r"SEARCH \S+ USING (?:COVERING )?INDEX \S+ \((.*?)\)", query_plan
    )
    return f"SCAN {TABLE}" in query_plan or any(s == "status=?" for s in searches)


@pytest.fixture
def keyed_rows(redis_client: Any) -> None:
    for n in range(20):
        schedule(add, args=[n, n], delay=60, key=f"order:{n}")
        schedule(add, args=[n, n], delay=60)
    # Finished rows, as a table in use holds many: a database that keeps
    # statistics (MariaDB) would otherwise rightly read the one cancelled
    # row through the status index.
    now = timezone.now()
    DelayedTask.objects.bulk_create(
        DelayedTask(
            name=add.name,
            key=f"done:{n % 50}",
            run_at=now,
            status=Status.CANCELLED if n % 2 else Status.SUCCEEDED,
            finished_at=now - datetime.timedelta(seconds=n),
        )
        for n in range(400)
    )


def test_cancel_by_key_uses_an_index(keyed_rows):
    with statements_on_key() as statements:
        assert cancel(key="order:7")
    assert broad_reads(statements) == []


def test_reschedule_by_key_uses_an_index(keyed_rows):
    with statements_on_key() as statements:
        reschedule(key="order:8", delay=120)
    assert broad_reads(statements) == []


def test_naming_the_holder_of_a_duplicate_key_uses_an_index(keyed_rows):
    calls = [
        Call(add, args=[1, 1], delay=60, key="order:3"),
        Call(add, args=[1, 1], delay=60, key="new"),
    ]
    with statements_on_key() as statements, pytest.raises(DuplicateTask):
        schedule_many(calls)
    assert broad_reads(statements) == []
