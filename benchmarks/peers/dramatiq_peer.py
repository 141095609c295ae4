"""Dramatiq: ``actor.send_with_options(delay=ms)`` on its Redis broker.

A delayed message goes to the queue's delay queue (``default.DQ``); each
worker process's delay consumer prefetches such messages (up to 1,000 per
worker thread), holds them in memory until their eta, then re-enqueues them
on the normal queue, whose consumer hands them to the worker threads. Both
consumers poll Redis, backing off up to ``dramatiq_worker_timeout`` (1 s by
default) while idle.

Worker: ``dramatiq benchmarks.peers.dramatiq_peer:worker_broker -p W``.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

from benchmarks.peers.base import TUNED_POLL_S, Peer, seconds_until, worker_broker_url
from benchmarks.peers.procs import cli
from benchmarks.peers.task import record

ACTOR_NAME = "record"


def make_broker(url: str) -> tuple[RedisBroker, dramatiq.Actor[Any, Any]]:
    broker = RedisBroker(url=url)
    actor = dramatiq.actor(record, actor_name=ACTOR_NAME, broker=broker)
    return broker, actor


@cache
def _worker_broker() -> RedisBroker:
    broker, _ = make_broker(worker_broker_url())
    dramatiq.set_broker(broker)
    return broker


def __getattr__(name: str) -> Any:
    # The worker CLI loads ``worker_broker`` from here; built on that access
    # only, so that importing the module in the client connects nowhere.
    if name == "worker_broker":
        return _worker_broker()
    raise AttributeError(name)


class DramatiqPeer(Peer):
    name = "dramatiq"

    def __init__(self, broker_url: str, *, tuned: bool) -> None:
        super().__init__(broker_url, tuned=tuned)
        self.broker, self.actor = make_broker(broker_url)

    def version(self) -> str:
        return f"dramatiq {dramatiq.__version__} (redis-py {redis.__version__})"

    def config(self, workers: int) -> str:
        base = f"-p {workers} processes x 8 threads, JSON, delay prefetch 8,000/process"
        if self.tuned:
            return (
                f"{base}; tuned: dramatiq_worker_timeout="
                f"{TUNED_POLL_S * 1000:g} ms (idle poll back-off cap)"
            )
        return f"{base}; defaults: dramatiq_worker_timeout=1000 ms"

    def schedule(self, tag: str, index: int, due: float) -> None:
        # Whole milliseconds, rounded up: never due before ``due``.
        delay_ms = math.ceil(seconds_until(due) * 1000)
        self.actor.send_with_options(args=(tag, index, due), delay=delay_ms)

    def worker_commands(self, workers: int) -> list[tuple[str, list[str]]]:
        argv = [cli("dramatiq"), f"{__name__}:worker_broker", "-p", str(workers)]
        return [("dramatiq", argv)]

    def worker_env(self) -> dict[str, str]:
        if self.tuned:
            return {"dramatiq_worker_timeout": str(round(TUNED_POLL_S * 1000))}
        return {}

    def close(self) -> None:
        self.broker.close()
