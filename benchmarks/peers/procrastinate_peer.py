"""procrastinate, through its Django integration: ``defer`` with ``schedule_in``.

A deferred job is a row in ``procrastinate_jobs`` (inserted by a PL/pgSQL
function, which also sends a NOTIFY); a worker, woken by the NOTIFY or by its
polling timer, fetches the next job whose ``scheduled_at`` has passed with
``SELECT ... FOR UPDATE SKIP LOCKED``. A job scheduled ahead is only found by
a poll after it is due: the NOTIFY came at insertion, when it was not due yet.

Client: ``record_task.configure(schedule_in=...).defer(...)`` through the
Django database connection (``procrastinate.contrib.django``).
Worker: ``python -m django procrastinate worker``, W of them.
"""

from __future__ import annotations

from typing import Any

import procrastinate
import psycopg

from benchmarks.peers.base import TUNED_POLL_S, Peer, seconds_until
from benchmarks.peers.django_peer import django_env, manage, setup_django

APP = "procrastinate"
# Tuned: as many jobs in flight per process as Dramatiq's default threads.
TUNED_CONCURRENCY = 8


class ProcrastinatePeer(Peer):
    name = "procrastinate"
    store = "postgres"
    tables = (
        "procrastinate_jobs",
        "procrastinate_events",
        "procrastinate_periodic_defers",
        "procrastinate_workers",
    )

    def __init__(self, broker_url: str, *, tuned: bool) -> None:
        super().__init__(broker_url, tuned=tuned)
        setup_django(broker_url, APP)  # migrate installs procrastinate's schema
        from benchmarks.peers.procrastinate_tasks import record_task

        self.task: Any = record_task

    def version(self) -> str:
        version = procrastinate.__version__
        return f"procrastinate {version} (psycopg {psycopg.__version__})"

    def config(self, workers: int) -> str:
        base = f"{workers} x `procrastinate worker` (Django), listen/notify on"
        if self.tuned:
            return (
                f"{base}; tuned: --concurrency {TUNED_CONCURRENCY}, "
                f"--fetch-job-polling-interval {TUNED_POLL_S:g}"
            )
        return f"{base}; defaults: concurrency 1, fetch polling interval 5 s"

    def schedule(self, tag: str, index: int, due: float) -> None:
        self.task.configure(schedule_in={"seconds": seconds_until(due)}).defer(
            tag=tag, index=index, due=due
        )

    def worker_commands(self, workers: int) -> list[tuple[str, list[str]]]:
        argv = manage("procrastinate", "worker")
        if self.tuned:
            argv += ["--concurrency", str(TUNED_CONCURRENCY)]
            argv += ["--fetch-job-polling-interval", str(TUNED_POLL_S)]
        return [(f"procrastinate worker {n}", argv) for n in range(1, workers + 1)]

    def worker_env(self) -> dict[str, str]:
        return django_env(self.broker_url, APP)

    def close(self) -> None:
        from django.db import connections

        connections.close_all()
