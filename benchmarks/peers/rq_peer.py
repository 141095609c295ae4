"""RQ: ``Queue.enqueue_in(timedelta, ...)``.

A scheduled job is a hash plus an entry in the queue's ``ScheduledJobRegistry``
(a sorted set); the scheduler process that one worker started with
``--with-scheduler`` polls the registry every second and moves due jobs to the
queue, where a worker forks a work horse per job.

``enqueue_many`` takes no delay, so the bulk figure is ``enqueue_in`` with a
shared ``pipeline=`` (1,000 jobs per round trip), which RQ accepts on every
enqueue call.

Workers: ``rq worker --with-scheduler --url URL default``, W of them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta

import redis
import rq
from rq import Queue, SimpleWorker
from rq.defaults import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT
from rq.scheduler import RQScheduler

from benchmarks.peers.base import TUNED_POLL_S, Peer, seconds_until
from benchmarks.peers.procs import cli
from benchmarks.peers.task import record

QUEUE = "default"


class FastScheduler(RQScheduler):
    """RQ's scheduler polling every ``TUNED_POLL_S`` instead of every second.

    ``interval`` stays an integer second because RQ also derives its lock
    and heartbeat TTLs from it (EXPIRE takes whole seconds); the heartbeat
    keeps that one-second pace, only the registry poll runs faster.
    """

    poll_s = TUNED_POLL_S

    def work(self) -> None:
        self._install_signal_handlers()
        self.register_birth()
        next_heartbeat = 0.0
        while not self._stop_requested:
            if self.should_reacquire_locks:
                self.acquire_locks()
            now = time.monotonic()
            if now >= next_heartbeat:
                self.heartbeat()
                next_heartbeat = now + self.interval
            self.enqueue_scheduled_jobs()
            time.sleep(self.poll_s)
        self.stop()


class TunedWorker(SimpleWorker):
    """No fork per job (``SimpleWorker``), and the fast-polling scheduler."""

    def _start_scheduler(
        self,
        burst: bool = False,
        logging_level: str | None = "INFO",
        date_format: str = DEFAULT_LOGGING_DATE_FORMAT,
        log_format: str = DEFAULT_LOGGING_FORMAT,
    ) -> None:
        # BaseWorker._start_scheduler with our scheduler class; the harness
        # never runs RQ in burst mode.
        self.scheduler = FastScheduler(
            self.queues,
            connection=self.connection,
            logging_level=logging_level if logging_level is not None else "INFO",
            date_format=date_format,
            log_format=log_format,
            serializer=self.serializer,
        )
        self.scheduler.acquire_locks()
        if self.scheduler.acquired_locks:
            self.scheduler.start()


class RQPeer(Peer):
    name = "rq"
    bulk_batch = 1000
    bulk_label = "enqueue_in(pipeline=) x1000"

    def __init__(self, broker_url: str, *, tuned: bool) -> None:
        super().__init__(broker_url, tuned=tuned)
        self.conn = redis.Redis.from_url(broker_url)
        self.queue = Queue(QUEUE, connection=self.conn)

    def version(self) -> str:
        return f"rq {rq.__version__} (redis-py {redis.__version__})"

    def config(self, workers: int) -> str:
        base = f"{workers} x `rq worker --with-scheduler`, pickle"
        if self.tuned:
            return (
                f"{base}; tuned: SimpleWorker (no fork per job), scheduler "
                f"poll {TUNED_POLL_S * 1000:g} ms (RQScheduler work loop; "
                "heartbeat stays 1 s), --quiet"
            )
        return f"{base}; defaults: fork per job, scheduler poll 1 s, INFO logs"

    def schedule(self, tag: str, index: int, due: float) -> None:
        delay = timedelta(seconds=seconds_until(due))
        self.queue.enqueue_in(delay, record, tag, index, due)

    def bulk_schedule(self, tag: str, items: Sequence[tuple[int, float]]) -> None:
        with self.conn.pipeline() as pipe:
            for index, due in items:
                delay = timedelta(seconds=seconds_until(due))
                self.queue.enqueue_in(delay, record, tag, index, due, pipeline=pipe)
            pipe.execute()

    def worker_commands(self, workers: int) -> list[tuple[str, list[str]]]:
        commands = []
        for number in range(1, workers + 1):
            argv = [cli("rq"), "worker", "--with-scheduler", "--url", self.broker_url]
            if self.tuned:
                argv += ["--worker-class", f"{__name__}.TunedWorker", "--quiet"]
            argv.append(QUEUE)
            commands.append((f"rq worker {number}", argv))
        return commands

    def close(self) -> None:
        self.conn.close()
