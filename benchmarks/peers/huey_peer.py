"""Huey: ``task.schedule(args=..., delay=seconds)`` on ``RedisHuey``.

A scheduled task is first pushed on the queue list; a worker that pops it
sees its eta in the future and adds it to the schedule (a sorted set whose
members are the pickled messages); the consumer's scheduler pops due
messages every ``scheduler_interval`` seconds and pushes them on the queue,
where a worker's blocking BRPOP picks them up.

There is no knob to tune: the scheduler interval is clamped to 1..60 s and
must divide 60, and its default is already the minimum, 1 s. The tuned run
only quiets the per-task INFO logs.

Consumer: ``huey_consumer benchmarks.peers.huey_peer.worker_huey -w W -k process``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import huey
import redis
from huey import RedisHuey

from benchmarks.peers.base import Peer, seconds_until, worker_broker_url
from benchmarks.peers.procs import cli
from benchmarks.peers.task import record

HUEY_NAME = "delayq_peers"


def make_huey(url: str) -> tuple[RedisHuey, Any]:
    instance = RedisHuey(HUEY_NAME, url=url)
    task = instance.task(name="record")(record)
    return instance, task


@cache
def _worker_huey() -> RedisHuey:
    instance, _ = make_huey(worker_broker_url())
    return instance


def __getattr__(name: str) -> Any:
    # huey_consumer loads ``worker_huey`` from here; built on that access
    # only, so that importing the module in the client connects nowhere.
    if name == "worker_huey":
        return _worker_huey()
    raise AttributeError(name)


class HueyPeer(Peer):
    name = "huey"

    def __init__(self, broker_url: str, *, tuned: bool) -> None:
        super().__init__(broker_url, tuned=tuned)
        self.huey, self.task = make_huey(broker_url)

    def version(self) -> str:
        return f"huey {huey.__version__} (redis-py {redis.__version__})"

    def config(self, workers: int) -> str:
        base = (
            f"-w {workers} -k process, pickle, scheduler interval 1 s, "
            "blocking BRPOP (read_timeout 1 s)"
        )
        if self.tuned:
            return f"{base}; tuned: -q (no knob below the 1 s scheduler minimum)"
        return f"{base}; defaults: INFO logs"

    def schedule(self, tag: str, index: int, due: float) -> None:
        self.task.schedule(args=(tag, index, due), delay=seconds_until(due))

    def worker_commands(self, workers: int) -> list[tuple[str, list[str]]]:
        argv = [cli("huey_consumer"), f"{__name__}.worker_huey"]
        argv += ["-w", str(workers), "-k", "process"]
        if self.tuned:
            argv.append("-q")
        return [("huey_consumer", argv)]

    def close(self) -> None:
        self.huey.storage.pool.disconnect()
