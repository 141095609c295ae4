"""PgQueuer: ``SyncQueries.enqueue(..., execute_after=timedelta)``.

An enqueued job is a row in the ``pgqueuer`` table, whose insert trigger
sends a NOTIFY; the queue manager dequeues up to ``--batch-size`` eligible
jobs per query (``FOR UPDATE SKIP LOCKED``) and runs them as asyncio tasks.
Between dequeues it waits for a NOTIFY or until the earliest
``execute_after`` still ahead, at most ``--dequeue-timeout`` (30 s).

Client: ``SyncQueries(SyncPsycopgDriver(conn)).enqueue("record", payload,
execute_after=...)`` on an autocommit psycopg connection.
Worker: ``pgqueuer.run(create_pgqueuer)``, as ``pgq run`` runs it (see
:mod:`benchmarks.peers.pgqueuer_worker`), W of them.
"""

from __future__ import annotations

import contextlib
import datetime
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pgqueuer
import psycopg
from pgqueuer import PgQueuer
from pgqueuer.db import SyncPsycopgDriver
from pgqueuer.models import Job
from pgqueuer.queries import SyncQueries

from benchmarks.peers.base import Peer, seconds_until, worker_broker_url
from benchmarks.peers.procs import cli
from benchmarks.peers.task import record

ENTRYPOINT = "record"
TUNED_BATCH = 100


def _payload(tag: str, index: int, due: float) -> bytes:
    return f"{tag} {index} {due!r}".encode()


@contextlib.asynccontextmanager
async def create_pgqueuer() -> AsyncIterator[PgQueuer]:
    """The worker's factory: one connection, one entrypoint."""
    conn = await psycopg.AsyncConnection.connect(worker_broker_url(), autocommit=True)
    pgq = PgQueuer.from_psycopg_connection(conn)

    @pgq.entrypoint(ENTRYPOINT)
    async def run_record(job: Job) -> None:
        # PgQueuer takes only async entrypoints. record() is one RPUSH on
        # loopback, shorter than a hop to a thread (asyncio.to_thread), so it
        # runs on the loop, as a trivial task would.
        assert job.payload is not None
        tag, index, due = job.payload.decode().split()
        record(tag, int(index), float(due))

    try:
        yield pgq
    finally:
        await conn.close()


class PgQueuerPeer(Peer):
    name = "pgqueuer"
    store = "postgres"
    tables = ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics", "pgqueuer_schedules")

    def __init__(self, broker_url: str, *, tuned: bool) -> None:
        super().__init__(broker_url, tuned=tuned)
        # The schema, as its docs install it: `pgq install`.
        subprocess.run(
            [cli("pgq"), "--pg-dsn", broker_url, "install"],
            check=True,
            capture_output=True,
        )
        self.conn = psycopg.connect(broker_url, autocommit=True)
        self.queries: Any = SyncQueries(SyncPsycopgDriver(self.conn))

    def version(self) -> str:
        return f"pgqueuer {pgqueuer.__version__} (psycopg {psycopg.__version__})"

    def config(self, workers: int) -> str:
        base = (
            f"{workers} x `pgqueuer.run()` (as `pgq run`), psycopg driver, "
            "listen/notify, "
            "no concurrency limit"
        )
        if self.tuned:
            return f"{base}; tuned: --batch-size {TUNED_BATCH}, --log-level WARNING"
        return f"{base}; defaults: --batch-size 10, dequeue timeout 30 s, INFO logs"

    def schedule(self, tag: str, index: int, due: float) -> None:
        delay = datetime.timedelta(seconds=seconds_until(due))
        self.queries.enqueue(ENTRYPOINT, _payload(tag, index, due), execute_after=delay)

    def worker_commands(self, workers: int) -> list[tuple[str, list[str]]]:
        argv = [sys.executable, "-m", "benchmarks.peers.pgqueuer_worker"]
        if self.tuned:
            argv += ["--batch-size", str(TUNED_BATCH), "--log-level", "WARNING"]
        return [(f"pgqueuer worker {n}", argv) for n in range(1, workers + 1)]

    def close(self) -> None:
        self.conn.close()
