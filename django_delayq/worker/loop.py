"""The worker: reads the ready streams and runs the tasks they name.

One :class:`Worker` per ``delayq_worker`` process, with ``concurrency``
threads, each a consumer of every shard's group, taking batches of entries
(from the backlog, or with a blocking ``XREADGROUP``, which returns as soon
as one entry is there) for :class:`~django_delayq.worker.batch.Batch` to claim,
run and record in groups. An entry is acknowledged and deleted once its
task's outcome is committed; if the worker dies first, another reclaims it
when idle for ``VISIBILITY_TIMEOUT``
(:class:`~django_delayq.worker.readers.Reclaimer`), so the main thread
heartbeats the entries in flight (:mod:`django_delayq.worker.inflight`).

A paused queue (:mod:`django_delayq.queues`) is left out of the reads, and
what was read of it before the pause was seen is held, not started: every
read round asks :class:`~django_delayq.queues.PauseWatch`, which reads
Redis at most twice a second.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import DatabaseError, connections

from .. import registry
from ..conf import get_settings
from ..db.connections import recycle_connections
from ..exceptions import RedisUnavailable, WorkerStuck
from ..ids import process_name
from ..limits.groups import limited_queues, shard_numbers
from ..limits.slots import Slots
from ..queues import PauseWatch
from ..store import streams
from ..store.backoff import Backoff
from ..store.connection import BlockingReads, Client, get_client
from ..store.keys import shard_keys
from ..store.limits import RENEW_EVERY
from . import membership
from .batch import Batch
from .board import Board
from .group_commit import DEFAULT_BUDGET, DEFAULT_MAX_SIZE, Pacer
from .inflight import InFlight
from .quota import Quota
from .readers import Reclaimer, StreamReaders, read_now
from .stuck import give_up
from .time_limits import DEFAULT_GRACE, Watchdog

logger = logging.getLogger(__name__)

#: Entries a thread reads from each stream at once at least, unless told
#: otherwise; more when tasks are quick enough to run more per group.
DEFAULT_PREFETCH = 4

#: How long a read blocks on the server: also how long a graceful stop may
#: wait for an idle thread to notice it.
READ_BLOCK_MS = 5000

#: How long a read blocks while a queue of the worker is paused: a resume
#: is seen this soon by a thread blocked on the other queues' streams.
PAUSED_READ_BLOCK_MS = 1000

#: How often the main thread looks for tasks past their time limit.
WATCH_INTERVAL = 0.25

#: How often the main thread asks the database whether a task it runs was
#: cancelled (only while one runs; see time_limits.Watchdog.look_for_cancels).
CANCEL_LOOK_EVERY = 1.0


@dataclass
class WorkerStats:
    processed: int = 0
    dead_lettered: int = 0
    reclaimed: int = 0
    errors: int = 0


class Worker:
    """Run the tasks of the given queues.

    :param queues: queue names; ``None`` serves every configured queue.
    :param concurrency: threads, each running one task at a time.
    :param prefetch: entries a thread reads from each ready stream at once,
        at least (a thread reads as many as its next group can take when
        that is more); those it does not start at once wait (heartbeated,
        not yet claimed) for the next free thread of this worker.
    :param visibility_timeout: seconds an entry may go without a heartbeat
        before another worker reclaims it; defaults to
        ``DELAYQ["VISIBILITY_TIMEOUT"]``.
    :param group_size: tasks committed together at most; 1 runs every task
        in a transaction of its own.
    :param group_budget: seconds a group may run before it commits.
    :param max_tasks: stop after taking this many tasks (``None``: never),
        for recycling: the worker takes no more than that, also in batches.
    """

    def __init__(
        self,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 1,
        prefetch: int = DEFAULT_PREFETCH,
        visibility_timeout: float | None = None,
        group_size: int = DEFAULT_MAX_SIZE,
        group_budget: float = DEFAULT_BUDGET,
        max_tasks: int | None = None,
    ) -> None:
        settings = get_settings()
        names = list(settings.queues) if not queues else list(queues)
        self.queues = [settings.queue(name) for name in names]
        if not 1 <= concurrency <= 256:
            raise ValueError(f"concurrency must be from 1 to 256; got {concurrency}.")
        self.concurrency = concurrency
        if not 1 <= prefetch <= 1000:
            raise ValueError(f"prefetch must be from 1 to 1000; got {prefetch}.")
        self.prefetch = prefetch
        if not 1 <= group_size <= 1000:
            raise ValueError(f"group_size must be from 1 to 1000; got {group_size}.")
        if not 0 < group_budget <= 60:
            raise ValueError(
                f"group_budget must be more than 0 and at most 60 seconds; "
                f"got {group_budget}."
            )
        self.pacer = Pacer(budget=group_budget, max_size=group_size)
        self._quota = Quota(max_tasks)
        if visibility_timeout is not None and not 0 < visibility_timeout <= 86400:
            # Also refuses nan and inf, which would overflow the timers.
            raise ValueError(
                f"visibility_timeout must be more than 0 and at most 86400 "
                f"seconds; got {visibility_timeout}."
            )
        self.visibility_timeout = visibility_timeout or settings.visibility_timeout
        self.name = process_name()
        registry.autodiscover()  # the tasks' limits
        limited = limited_queues(get_client("loop"))
        keys = [
            shard_keys(settings.key_prefix, queue.name, number)
            for queue in self.queues
            for number in shard_numbers(queue, limited)
        ]
        #: the limits' slots this process holds (see django_delayq.limits.slots)
        self.slots = Slots(keys)
        #: each shard's ready streams, highest band first
        self.shards = [k.ready_bands for k in keys]
        self.streams = [stream for bands in self.shards for stream in bands]
        self.dead = {stream: k.dead for k in keys for stream in k.ready_bands}
        #: each ready stream's queue, for the pauses
        self._queue_of = {stream: k.queue for k in keys for stream in k.ready_bands}
        self._pauses = PauseWatch(get_client("loop"), [q.name for q in self.queues])
        self.stats = WorkerStats()
        self._stats_lock = threading.Lock()
        self._stopping = threading.Event()
        self._crashed = threading.Event()
        self._pass_error: Exception | None = None  # what ended a once pass
        self._in_flight = InFlight(self.streams)
        self.watchdog = Watchdog(DEFAULT_GRACE)
        self._reclaimer = Reclaimer(self.streams, self.visibility_timeout)
        #: the threads' blocking reads, which a stop ends at once
        self._reads = BlockingReads()
        #: this process's entry in ``<prefix>:workers`` (none for a once pass)
        self._heartbeat: membership.Heartbeat | None = None
        #: on a Redis Cluster, the threads that read the streams (see
        #: :mod:`django_delayq.worker.readers`); on one Redis each thread reads
        self._readers = (
            StreamReaders(
                self.shards,
                self._in_flight,
                consumer_prefix=f"{self.name}-",
                stopping=self._stopping,
                batch=lambda: max(self.prefetch, self.pacer.size()),
                backlog_limit=lambda: (
                    self.concurrency * max(self.prefetch, self.pacer.size())
                ),
                block_ms=READ_BLOCK_MS,
                reads=self._reads,
                lost=self._lost,
                paused=self._paused_streams,
            )
            if settings.cluster
            else None
        )

    # -- public ---------------------------------------------------------------

    @property
    def max_tasks(self) -> int | None:
        """Tasks to take before stopping (``None``: no limit); may be set
        before :meth:`run`."""
        return self._quota.limit

    @max_tasks.setter
    def max_tasks(self, limit: int | None) -> None:
        self._quota.limit = limit

    def run(self, *, once: bool = False) -> WorkerStats:
        """Work until :meth:`stop` (or, with ``once``, until nothing is ready)."""
        registry.autodiscover()
        client = get_client("loop")
        if not membership.join(
            client, self.name, self.streams, self._stopping, once=once
        ):
            return self.stats
        heartbeat = membership.Heartbeat(
            self.name,
            [q.name for q in self.queues],
            membership.beat_seconds(self.visibility_timeout),
        )
        if not once:  # a one-off pass is not a worker to watch
            heartbeat.alive(client)
            self._heartbeat = heartbeat
        # Known before any thread reads: none starts a paused queue's task.
        self._pauses.paused()
        logger.info(
            "worker %s: %d thread(s) on %s",
            self.name,
            self.concurrency,
            ", ".join(q.name for q in self.queues),
        )
        threads = [
            threading.Thread(
                target=self._consume,
                args=(f"{self.name}-{n}", once),
                name=f"delayq-worker-{n}",
                # A thread stuck in a task past its time limit must not keep
                # the process alive once the worker has given up on it.
                daemon=True,
            )
            for n in range(self.concurrency)
        ]
        for thread in threads:
            thread.start()
        if self._readers is not None and not once:
            self._readers.start()
        stuck = self._watch(client, threads, None if once else heartbeat)
        consumers = [f"{self.name}-{n}" for n in range(self.concurrency)]
        if self._readers is not None:
            self._readers.join()
            consumers += self._readers.consumers.values()
        self._in_flight.hand_back(client, self.name)
        membership.leave(client, self.name, self.streams, consumers)
        if not once:
            heartbeat.gone(client)
        if stuck:
            raise WorkerStuck(
                f"worker {self.name}: {stuck} task(s) ran past their time limit "
                f"(or their cancel's grace period) and could not be interrupted; "
                f"this process must be replaced"
            )
        if self._crashed.is_set():
            raise RuntimeError(
                f"worker {self.name}: a thread stopped on an error (logged above)"
            )
        if self._pass_error is not None:
            raise self._pass_error
        return self.stats

    def stop(self) -> None:
        """Finish the tasks in flight, read nothing new, return from run()."""
        self._stopping.set()

    def report_to(self, board: Board) -> None:
        """Show a supervisor what this worker runs, for when it dies
        (see :mod:`django_delayq.worker.board`)."""
        board.announce(self.name)
        self.watchdog.board = board

    def _watch(
        self,
        client: Client,
        threads: list[threading.Thread],
        heartbeat: membership.Heartbeat | None,
    ) -> int:
        """Heartbeat (the entries in flight, and with ``heartbeat`` the
        process itself) and enforce time limits until the threads end; return
        how many tasks were stuck past their limit."""
        # The main thread keeps the heartbeat going, also while a graceful
        # stop lets the tasks in flight finish.
        beat = membership.beat_seconds(self.visibility_timeout)
        next_beat = next_renewal = time.monotonic() + beat
        next_look = time.monotonic() + CANCEL_LOOK_EVERY
        given_up: set[int] = set()
        while alive := [t for t in threads if t.is_alive() and t.ident not in given_up]:
            alive[0].join(timeout=min(beat, WATCH_INTERVAL))
            if time.monotonic() >= next_look:
                self.watchdog.look_for_cancels()
                next_look = time.monotonic() + CANCEL_LOOK_EVERY
            if self.slots.by_stream:
                renew = time.monotonic() >= next_renewal
                self._keep_slots(client, renew=renew)
                if renew:
                    next_renewal = time.monotonic() + RENEW_EVERY
            if self._stopping.is_set():
                # Again at each look: a read whose server does not close its
                # connection is cut harder (see BlockingReads.end).
                self._reads.end()
            elif heartbeat is not None:
                heartbeat.renew_if_asked(client)
            for stuck in self.watchdog.check():
                if stuck.thread_id not in given_up:
                    given_up.add(stuck.thread_id)
                    give_up(client, self.name, stuck)
                    # The other threads finish what they hold; then the
                    # process exits and a fresh one takes its place.
                    self.stop()
            if time.monotonic() >= next_beat:
                self._in_flight.beat(client, self.name)
                if heartbeat is not None:
                    heartbeat.alive(client)
                next_beat = time.monotonic() + beat
        return len(given_up)

    def _keep_slots(self, client: Client, *, renew: bool) -> None:
        """Report the functions started under limits; with ``renew``, renew
        the slots held (see django_delayq.limits.slots)."""
        try:
            self.slots.report_starts(client)
            if renew:
                self.slots.renew(client)
        except RedisUnavailable as exc:
            logger.warning("worker %s: could not renew its slots: %s", self.name, exc)

    def _consume(self, consumer: str, once: bool) -> None:
        client = get_client("blocking")
        batch = Batch(
            client,
            consumer,
            dead=self.dead,
            pacer=self.pacer,
            release=self._in_flight.release,
            early_wait=min(self.visibility_timeout / 3, 5.0),
            watchdog=self.watchdog,
            slots=self.slots,
        )
        backoff = Backoff(f"worker {consumer}", logger, again="working again")
        try:
            while not self._stopping.is_set():
                pending: list[streams.Entry] = []
                try:
                    pending = self._next(client, consumer, once)
                    if not pending:
                        backoff.answered()
                        if once:
                            return
                        continue
                    # Drop connections that broke (or outlived a positive
                    # CONN_MAX_AGE), but reuse healthy ones (see db.connections).
                    recycle_connections()
                    counts = batch.handle(pending)
                    self._count("processed", counts.processed)
                    self._count("dead_lettered", counts.dead_lettered)
                    backoff.answered()
                except DatabaseError as exc:
                    # Keep what is left (heartbeated) and try it first once
                    # the database answers, instead of waiting for a reclaim.
                    # Some of it may be claimed already: marked as reclaimed,
                    # it takes the one-row path that takes a claim over, and
                    # a stop leaves it pending rather than requeuing it as a
                    # new entry (which the claimed row would not know).
                    self._in_flight.retry_first(
                        [dataclasses.replace(e, reclaimed=True) for e in pending]
                    )
                    if once:
                        return self._end_pass(exc)
                    self._pause(backoff, exc)
                except Exception as exc:
                    # Reclaimed after the visibility timeout; the rows decide.
                    self._in_flight.release(pending)
                    if isinstance(exc, RedisUnavailable):
                        self._lost()
                    if once:
                        return self._end_pass(exc)
                    self._pause(backoff, exc)
        except BaseException:
            self._crashed.set()
            logger.exception("worker %s: thread stopped by an error", consumer)
            raise
        finally:
            connections.close_all()

    def _end_pass(self, exc: Exception) -> None:
        """End a ``once`` pass at its first error, for :meth:`run` to raise
        ("do what is due and exit" must not wait for a database that may
        never answer: a test's own transaction holding SQLite)."""
        self._pass_error = self._pass_error or exc
        self.stop()

    def _pause(self, backoff: Backoff, exc: Exception) -> None:
        self._count("errors")
        self._stopping.wait(backoff.failed(exc))

    def _next(self, client: Client, consumer: str, once: bool) -> list[streams.Entry]:
        """The next entries to run: from this process's backlog, or read anew.

        As many as the next group can take; a read that brings more leaves
        the rest in the backlog, for whichever thread is free first.
        """
        size = self._quota.reserve(self.pacer.size())
        if not size:
            self.stop()  # max_tasks reached
            return []
        entries: list[streams.Entry] = []
        try:
            paused = self._paused_streams()
            entries = self._in_flight.take(size, paused)
            if entries and self._readers is not None:
                self._readers.made_room()
            if not entries:
                read = self._reclaimer.take(client, consumer)
                self._count("reclaimed", len(read))
                if not read and self._readers is not None and not once:
                    arrived = self._in_flight.take_arriving(
                        size, READ_BLOCK_MS / 1000, paused
                    )
                    self._readers.made_room()
                    # Asked again after the wait, as after a read below.
                    paused = self._paused_streams()
                    self._in_flight.hold_back(e for e in arrived if e.stream in paused)
                    entries = [e for e in arrived if e.stream not in paused]
                    return entries
                if not read:
                    shards = [bands for bands in self.shards if bands[0] not in paused]
                    if not shards:  # every queue of this worker is paused
                        if not once:
                            self._stopping.wait(PAUSED_READ_BLOCK_MS / 1000)
                        return []
                    read = read_now(
                        client,
                        consumer,
                        shards,
                        count=max(self.prefetch, size),
                        block_ms=(
                            None
                            if once
                            else PAUSED_READ_BLOCK_MS
                            if paused
                            else READ_BLOCK_MS
                        ),
                        one_at_a_time=self._readers is not None,
                        reads=self._reads,
                        lost=self._lost,
                    )
                self._in_flight.hold(read, consumer)
                # Again after the read, which may have blocked for seconds:
                # what a queue paused meanwhile brought is held, not started.
                paused = self._paused_streams()
                self._in_flight.hold_back(e for e in read if e.stream in paused)
                read = [e for e in read if e.stream not in paused]
                self._in_flight.wait(read[size:])
                entries = read[:size]
            return entries
        finally:
            self._quota.give_back(size - len(entries))

    def _paused_streams(self) -> frozenset[str]:
        """The ready streams of this worker's paused queues."""
        if not (paused := self._pauses.paused()):
            return frozenset()
        return frozenset(s for s, q in self._queue_of.items() if q in paused)

    def _lost(self) -> None:
        """Redis may have lost data (an error, or a read it ended): have the
        main thread write this worker's heartbeat again now, not at its next
        beat (a third of the visibility timeout away), so that it is not
        reported dead meanwhile."""
        if self._heartbeat is not None:
            self._heartbeat.renew_soon()

    def _count(self, field: str, amount: int = 1) -> None:
        if amount:
            with self._stats_lock:
                setattr(self.stats, field, getattr(self.stats, field) + amount)
