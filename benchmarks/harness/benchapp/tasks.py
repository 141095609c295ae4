"""The task functions that the end-to-end runs and the direct-call baseline share."""

from __future__ import annotations

import os

from benchmarks.harness.benchapp.models import BenchRow
from django_delayq import task


@task
def noop(n: int) -> None:
    """A task that does nothing: the benchmarks measure the queue."""


@task
def write_row(n: int) -> None:
    """A task that inserts one row with the ORM: the smallest real work."""
    BenchRow.objects.create(n=n)


#: The task kinds, by the name the harness and the report use.
KINDS = {"noop": noop, "write_row": write_row}

# benchmarks.scenarios.limits sets it, for itself and the processes it
# starts: no other scenario's processes see a task under a limit.
if os.environ.get("DELAYQ_BENCH_LIMITS"):
    from benchmarks.harness.benchapp import limited_tasks  # noqa: F401
