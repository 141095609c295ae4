"""The benchmark task as a ``django.tasks`` task, for django-tasks-db.

A task is found by its module path, so it is defined here rather than by
decorating :func:`benchmarks.peers.task.record` (whose path names the plain
function); it only forwards its arguments.
"""

from __future__ import annotations

from django.tasks import task

from benchmarks.peers.task import record as _record


@task()
def record(tag: str, index: int, due: float) -> None:
    _record(tag, index, due)
