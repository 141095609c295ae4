"""The harness's side of the recorder: what the tasks reported.

Every peer runs the same trivial task, :func:`benchmarks.peers.task.record`,
which RPUSHes ``"<index> <due> <started>"`` to a list named after the
scenario on a *separate* redis-server, so that the measured Redis sees only
the peer's own traffic (its INFO stats and memory stay clean).

Times are ``time.time()`` seconds: the client that sets the due time and
the worker that starts the task run on the same machine, so they share one
clock.
"""

from __future__ import annotations

import time

import redis

from benchmarks.peers.stats import Sample, parse_sample
from benchmarks.peers.task import RECORDER_URL_ENV, samples_key

__all__ = ["RECORDER_URL_ENV", "Recorder"]


class Recorder:
    """The harness's side: count and read what the tasks recorded."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = redis.Redis.from_url(url)

    def count(self, tag: str) -> int:
        return int(self.client.llen(samples_key(tag)))

    def samples(self, tag: str) -> list[Sample]:
        return [
            parse_sample(raw) for raw in self.client.lrange(samples_key(tag), 0, -1)
        ]

    def wait(self, tag: str, n: int, deadline: float) -> int:
        """Wait until ``n`` entries are recorded or ``time.time()`` passes
        ``deadline``; return the count. Repeats count too, so the caller
        dedupes before judging."""
        while True:
            count = self.count(tag)
            if count >= n or time.time() >= deadline:
                return count
            time.sleep(min(0.05, max(0.0, deadline - time.time())))

    def close(self) -> None:
        self.client.close()
