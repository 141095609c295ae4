from __future__ import annotations

from django_delayq import task


@task
def noop(n: int) -> None:
    """A task that does nothing: the benchmarks measure the queue."""
