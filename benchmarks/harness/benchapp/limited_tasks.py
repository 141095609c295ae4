"""Tasks under flow control, for ``benchmarks.scenarios.limits``.

Imported by ``tasks.py`` only when ``DELAYQ_BENCH_LIMITS`` is set, which that
scenario does for itself and for the processes it starts; the queue
``"limited"`` exists only then too (``harness/settings.py``). So no other
scenario's processes register a task under a limit or serve a limits shard.

Each of the measured tasks writes one row, as ``write_row`` does: the
``limit_run`` table's (created by the scenario, not a model: no migration
for a table that only one scenario uses) holds the moment the function
started, on this machine's clock, and the moment its insert ran
(PostgreSQL's ``clock_timestamp()``, on the same host), so that the
scenario can tell how many ran at once and how many started in any second.
``wide_open`` writes the ``write_row`` row itself: the cost of limits that
never bind, against ``write_row`` (no limit).
"""

from __future__ import annotations

import os
import time

from django.db import connection

from benchmarks.harness.benchapp.models import BenchRow
from django_delayq import task

#: The queue of the tasks under a limit of a few (configured in
#: harness/settings.py when DELAYQ_BENCH_LIMITS is set).
QUEUE = "limited"
#: The table each run's row goes to (see benchmarks.scenarios.limits).
RUNS_TABLE = "benchapp_limit_run"
#: The rate limit of ``rate_limited``, starts per second.
RATE = int(os.environ.get("DELAYQ_BENCH_RATE", "50"))


def record(key: str, n: int, started: float) -> None:
    """Insert the run's one row: its key, number, start and end."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {RUNS_TABLE} (key, n, started, ended) "
            "VALUES (%s, %s, %s, extract(epoch FROM clock_timestamp()))",
            [key, n, started],
        )


@task(queue=QUEUE, concurrency_limit=1)
def one_at_once(n: int) -> None:
    record("one", n, time.time())


@task(queue=QUEUE, concurrency_limit=5)
def five_at_once(n: int) -> None:
    record("five", n, time.time())


@task(queue=QUEUE, rate_limit=f"{RATE}/s")
def rate_limited(n: int) -> None:
    record("rate", n, time.time())


@task(queue=QUEUE, concurrency_limit=1, limit_by="tenant")
def one_per_tenant(tenant: str, n: int) -> None:
    record(tenant, n, time.time())


@task(concurrency_limit=10_000, rate_limit="100000/s")
def wide_open(n: int) -> None:
    """``write_row`` under limits far above what the machine runs, on the
    default queue (whose limits shard it then has)."""
    BenchRow.objects.create(n=n)


#: The concurrency-limited tasks, by their limit.
AT_ONCE = {1: one_at_once, 5: five_at_once}
