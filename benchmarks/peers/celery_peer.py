"""Celery: ``apply_async(countdown=...)`` on a Redis broker.

A countdown task is published at once; a worker takes it off the queue and
holds it in its own memory on a timer until it is due (Redis keeps a copy in
the transport's ``unacked`` hash meanwhile).

Worker: ``celery -A benchmarks.peers.celery_peer:worker_app worker -c W``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import celery
import kombu
from celery import Celery

from benchmarks.peers.base import Peer, seconds_until, worker_broker_url
from benchmarks.peers.procs import cli
from benchmarks.peers.task import record

TASK_NAME = "peers.record"

# Worker options turned in the tuned run: no gossip, mingle or heartbeat
# traffic (they serve a cluster's monitoring, not the tasks).
TUNED_WORKER_ARGS = ["--without-gossip", "--without-mingle", "--without-heartbeat"]


def make_app(broker_url: str) -> Celery:
    app = Celery("delayq_peers", broker=broker_url, set_as_current=False)
    app.task(name=TASK_NAME)(record)
    return app


@cache
def _worker_app() -> Celery:
    return make_app(worker_broker_url())


def __getattr__(name: str) -> Any:
    # The worker CLI loads ``worker_app`` from here; building it only on that
    # access keeps the client process (which has no broker in its
    # environment) free to import the module.
    if name == "worker_app":
        return _worker_app()
    raise AttributeError(name)


class CeleryPeer(Peer):
    name = "celery"

    def __init__(self, broker_url: str, *, tuned: bool) -> None:
        super().__init__(broker_url, tuned=tuned)
        self.app = make_app(broker_url)
        self.task = self.app.tasks[TASK_NAME]

    def version(self) -> str:
        return f"celery {celery.__version__} (kombu {kombu.__version__})"

    def config(self, workers: int) -> str:
        base = (
            f"prefork pool -c {workers}, prefetch multiplier 4, JSON, "
            "countdown tasks held in worker RAM, visibility_timeout 3600 s"
        )
        if self.tuned:
            return f"{base}; tuned: {' '.join(TUNED_WORKER_ARGS)}"
        return f"{base}; defaults (gossip, mingle, heartbeat on)"

    def schedule(self, tag: str, index: int, due: float) -> None:
        self.task.apply_async(args=[tag, index, due], countdown=seconds_until(due))

    def worker_commands(self, workers: int) -> list[tuple[str, list[str]]]:
        argv = [cli("celery"), "-A", f"{__name__}:worker_app", "worker"]
        argv += ["-c", str(workers), "-l", "WARNING"]
        if self.tuned:
            argv += TUNED_WORKER_ARGS
        return [("celery worker", argv)]

    def close(self) -> None:
        self.app.close()
