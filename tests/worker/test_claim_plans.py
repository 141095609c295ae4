"""The worker's claim and outcome statements find their rows by primary key
whatever PostgreSQL's statistics say.

A table analyzed while it was small (a new deployment; one that grew since
autovacuum's last ANALYZE) once led the planner to read every scheduled row
through the status index for each claim: milliseconds per claim at ten
thousand scheduled rows, on every task's path to its start.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from django_delayq import transitions
from django_delayq.models import DelayedTask, Status

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="PostgreSQL's planner: SQLite claims with a statement of its own",
    ),
]

TABLE = DelayedTask._meta.db_table


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


@pytest.fixture
def plans() -> Iterator[list[dict[str, Any]]]:
    """The plan of each UPDATE of the task table run meanwhile, taken with
    EXPLAIN just before the statement runs."""
    taken: list[dict[str, Any]] = []

    def explain(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith(f'UPDATE "{TABLE}"'):
            with context["connection"].cursor() as cursor:
                cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
                (document,) = cursor.fetchone()
            if isinstance(document, str):
                document = json.loads(document)
            taken.append(document[0]["Plan"])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(explain):
        yield taken


@pytest.fixture
def analyzed_while_small() -> list[DelayedTask]:
    """20,000 due scheduled rows in a table last analyzed when empty."""
    DelayedTask.objects.all().delete()
    with connection.cursor() as cursor:
        cursor.execute(f'ANALYZE "{TABLE}"')
    due = timezone.now() - datetime.timedelta(seconds=1)
    return DelayedTask.objects.bulk_create(
        DelayedTask(name="tests.add", run_at=due, status=Status.SCHEDULED)
        for _ in range(20_000)
    )


def _read_by_primary_key(plan: dict[str, Any]) -> bool:
    """Whether the table is read through its primary key's index alone
    (an index scan, or a bitmap of that index), never scanned whole."""
    nodes = list(_nodes(plan))
    indexes = {node["Index Name"] for node in nodes if "Index Name" in node}
    whole = [
        node
        for node in nodes
        if node["Node Type"] == "Seq Scan" and node.get("Relation Name") == TABLE
    ]
    return indexes == {f"{TABLE}_pkey"} and not whole


def test_a_claim_and_a_group_outcome_read_their_rows_by_primary_key(
    analyzed_while_small, plans
):
    rows = analyzed_while_small
    now = timezone.now()
    claimed = []
    for claims in ([rows[0]], rows[1:40]):
        claimed += transitions.claim_due(
            [(row.pk, f"{n}-0") for n, row in enumerate(claims)], now, "w-1", "default"
        )
    assert len(claimed) == 40
    successes = [transitions.Success(row, now, None) for row in claimed[1:]]
    assert transitions.succeed_many(successes, timezone.now(), "default")
    assert DelayedTask.objects.filter(status=Status.SUCCEEDED).count() == 39
    # Two claims, then the outcome of a group of 39.
    assert len(plans) == 3
    for plan in plans:
        assert _read_by_primary_key(plan), json.dumps(plan, indent=1)
