"""The task functions that the end-to-end runs and the direct-call baseline share."""

from __future__ import annotations

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
