"""django-tasks-db: ``django.tasks`` with ``.using(run_after=...).enqueue()``.

An enqueued task is a row in ``django_tasks_database_dbtaskresult``; each
worker loops: in a transaction, take the first READY row whose ``run_after``
has passed (``SELECT ... FOR UPDATE SKIP LOCKED``), mark it RUNNING, commit;
run it; save the outcome. When it finds nothing it sleeps ``--interval``
seconds (1 s by default). One task at a time per worker process.

Client: ``record.using(run_after=<due>).enqueue(...)`` (the due time as an
aware datetime: ``run_after`` takes a point in time, not a delay).
Worker: ``python -m django db_worker``, W of them.
"""

from __future__ import annotations

import datetime
from importlib import metadata
from typing import Any

import django

from benchmarks.peers.base import TUNED_POLL_S, Peer
from benchmarks.peers.django_peer import django_env, manage, setup_django

APP = "django-tasks-db"


class TasksDBPeer(Peer):
    name = "django-tasks-db"
    store = "postgres"
    tables = ("django_tasks_database_dbtaskresult",)

    def __init__(self, broker_url: str, *, tuned: bool) -> None:
        super().__init__(broker_url, tuned=tuned)
        setup_django(broker_url, APP)
        from benchmarks.peers.tasks_db_tasks import record

        self.task: Any = record

    def version(self) -> str:
        return (
            f"django-tasks-db {metadata.version('django-tasks-db')} "
            f"(Django {django.get_version()})"
        )

    def config(self, workers: int) -> str:
        base = f"{workers} x `db_worker`, one task at a time each"
        if self.tuned:
            return (
                f"{base}; tuned: --interval {TUNED_POLL_S:g} --no-startup-delay "
                "-v 0 (no per-task INFO logs)"
            )
        return f"{base}; defaults: --interval 1 s, random start-up delay, INFO logs"

    def schedule(self, tag: str, index: int, due: float) -> None:
        run_after = datetime.datetime.fromtimestamp(due, datetime.UTC)
        self.task.using(run_after=run_after).enqueue(tag, index, due)

    def worker_commands(self, workers: int) -> list[tuple[str, list[str]]]:
        argv = manage("db_worker", "--no-reload")
        if self.tuned:
            argv += ["--interval", str(TUNED_POLL_S), "--no-startup-delay"]
            argv += ["-v", "0"]
        # Each worker makes up its own random --worker-id.
        return [(f"db_worker {n}", argv) for n in range(1, workers + 1)]

    def worker_env(self) -> dict[str, str]:
        return django_env(self.broker_url, APP)

    def close(self) -> None:
        from django.db import connections

        connections.close_all()
