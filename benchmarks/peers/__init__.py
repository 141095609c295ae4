"""Delay queues that django-delayq is measured against, on the same Redis.

Celery ``apply_async(countdown=...)``, RQ ``enqueue_in``, Dramatiq
``send_with_options(delay=...)`` and Huey ``schedule(delay=...)`` on Redis;
and the peers that keep a database row per task, on PostgreSQL:
procrastinate (``defer`` with ``schedule_in``, Django integration), PgQueuer
(``execute_after``) and django-tasks-db (``django.tasks``, ``run_after``).
Each runs with its default settings and with its obvious knobs turned,
workers run as subprocesses of their own CLIs::

    from benchmarks.peers import PEERS, run_peer

    result = run_peer("rq", n_schedule=2000, light=(25, 10), steady=(1000, 10),
                      burst_n=20000, burst_window_s=2.0, workers=1,
                      idle_seconds=20, memory_n=20000, tuned=False,
                      time_limit_s=30)

``result`` is JSON-serialisable::

    {"peer", "version", "config", "schedule_per_s", "bulk_schedule_per_s",
     "light": {"n", "fired", "p50_ms", "p90_ms", "p99_ms", "max_ms"},
     "steady": {...}, "burst": {..., "completed_per_s"},
     "idle_cmds_per_s", "redis_bytes_per_task", "db_bytes_per_task",
     "store", "errors": [...]}

For a PostgreSQL peer ``idle_cmds_per_s`` counts transactions, and the bytes
go under ``db_bytes_per_task``; ``store`` says which ("redis", "postgres").

Lateness is start - due in ms, both ``time.time()`` on this one machine;
percentiles are nearest-rank over the tasks that fired. The command line
(``python -m benchmarks.peers --help``) prints a markdown table.

The peers' packages come from the ``bench`` dependency group; nothing here
imports them until a peer is run.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PEERS", "run_peer"]

PEERS = [
    "celery",
    "rq",
    "dramatiq",
    "huey",
    "procrastinate",
    "pgqueuer",
    "django-tasks-db",
]
#: The peers that keep a database row per task, as django-delayq does; they
#: run on PostgreSQL, not Redis.
POSTGRES_PEERS = ["procrastinate", "pgqueuer", "django-tasks-db"]


def __getattr__(name: str) -> Any:
    # Worker processes import benchmarks.peers.recorder, hence this package,
    # and RQ's default worker does so in every forked work horse: the
    # runner's imports must not be paid there, so they load on first use.
    if name == "run_peer":
        from benchmarks.peers.runner import run_peer

        return run_peer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
