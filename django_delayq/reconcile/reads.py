"""Reading the rows a reconciliation needs, a batch per query, with nothing
kept on the database server between two queries.

``QuerySet.iterator()`` would stream them through a server-side cursor on
PostgreSQL: a named cursor that lives in the database session, held open
across transactions. Behind PgBouncer in transaction pooling (and any
pooler like it) each transaction may run on another server connection, and
the next ``FETCH`` fails with 'cursor "_django_curs_..." does not exist'
unless the project sets ``DISABLE_SERVER_SIDE_CURSORS``, which we do not
require. Each batch here is a query of its own instead, resuming after the
last row of the one before (keyset pagination).

The key is ``(run_at, pk)``, not the primary key alone: the rows read are
those of one status by due time, which the ``(status, run_at)`` index
serves in order, so each batch starts where the last one stopped. Ordered
by primary key, each batch would read the whole window again (or the whole
table, finished rows included) to find its next rows.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Q, QuerySet

from ..models import DelayedTask


def read_in_run_at_order(
    rows: QuerySet[DelayedTask], batch: int
) -> Iterator[DelayedTask]:
    """Every row of ``rows`` (filtered on one status; ``run_at`` and ``pk``
    among the fields it loads), the most overdue first, read ``batch`` rows
    per query and yielded as they come: memory stays that of one batch,
    whatever the table holds (a rebuild reads every scheduled row).

    Each query sees the table as it is then: a row whose due time moved
    later meanwhile can come again, in its later state, which its readers
    (indexing a row as it is) take as they would the first.
    """
    ordered = rows.order_by("run_at", "pk")
    page = ordered
    while True:
        got = list(page[:batch])
        yield from got
        if len(got) < batch:
            return
        last = got[-1]
        # ">= run_at" too, which the index can start from; the OR alone
        # would make each batch scan the window from its beginning.
        page = ordered.filter(run_at__gte=last.run_at).filter(
            Q(run_at__gt=last.run_at) | Q(pk__gt=last.pk)
        )
