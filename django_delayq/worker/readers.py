"""Reading the ready streams, highest priority band first; on a Redis
Cluster, one reader thread per shard; taking over what stopped workers held.

A shard has one ready stream per priority band. A read takes the highest
band's entries first, and a lower band's only for what the higher bands could
not fill (``lua/read.lua``, one script per shard); only when every band is
empty does it block, with one ``XREADGROUP`` of the streams, highest bands
first.

On a single Redis each worker thread reads every stream it serves that way.
On a Redis Cluster a command may only name keys of one slot, and each shard
is a slot of its own, possibly on another node. So a worker process on a
cluster runs one *reader* thread per shard: each is a consumer of its
shard's groups, blocks on that shard's band streams alone (one slot), and
puts what it reads into the worker's backlog
(:class:`~django_delayq.worker.inflight.InFlight`), where the worker threads wait
for it. An entry is therefore read as soon as it is added to any shard, with
no polling: idle, a reader costs one command per ``READ_BLOCK_MS`` for its
shard.

A reader reads only while the backlog is short (about one group's worth per
worker thread), so a busy worker does not take entries that another, idle
worker could run now. What it read stays heartbeated and, if the worker
stops, is handed back like any backlog entry.

Entries idle for longer than the visibility timeout belong to a worker that
died or is paused (or to a supervised worker process whose rescue could not
finish, see :mod:`django_delayq.supervisor.rescue`): any thread of any worker may take
them over with ``XAUTOCLAIM`` (:class:`Reclaimer`), and the row then decides
what the takeover may do (:func:`django_delayq.transitions.claim`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from ..exceptions import RedisUnavailable
from ..store import streams
from ..store.backoff import Backoff
from ..store.connection import BlockingReads, Client, get_client
from ..store.errors import Answers
from ..store.keys import BANDS
from .inflight import InFlight

logger = logging.getLogger(__name__)


def read_now(
    client: Client,
    consumer: str,
    shards: Sequence[Sequence[str]],
    *,
    count: int,
    block_ms: int | None,
    one_at_a_time: bool,
    reads: BlockingReads,
    lost: Callable[[], None],
) -> list[streams.Entry]:
    """Read new entries for ``consumer`` from its own thread, highest band
    first; ``shards`` holds each shard's ready streams, highest band first.

    On one Redis: every shard's bands, then (if nothing was there) a
    blocking read of every stream up to ``block_ms`` (``None``: none), which
    ``reads`` can end. On a cluster (``one_at_a_time``; only for ``--once``,
    as readers read otherwise): each shard in turn, without blocking, until
    one has entries. ``lost`` is called when Redis may have lost data (see
    :func:`read_bands`).
    """
    if not one_at_a_time:
        return read_bands(
            client,
            consumer,
            shards,
            count=count,
            block_ms=block_ms,
            reads=reads,
            lost=lost,
        )
    for bands in shards:
        if read := streams.read_bands(
            client, consumer, [bands], count=count, lost=lost
        ):
            return read
    return []


def read_bands(
    client: Client,
    consumer: str,
    shards: Sequence[Sequence[str]],
    *,
    count: int,
    block_ms: int | None,
    reads: BlockingReads,
    lost: Callable[[], None],
) -> list[streams.Entry]:
    """The shards' entries highest band first; if there are none, wait up to
    ``block_ms`` for the next ones, unless ``reads`` ends the wait first
    (a stopping worker: nothing is read then).

    A wait that ends early with nothing, or with an error, may mean that
    Redis lost the streams (a restart without persistence, ``FLUSHALL``,
    a failover: Redis ends such a read, or the connection drops): ``lost``
    is called then, so that the worker writes its heartbeat again at once.
    """
    # A group Redis lost since the last read is made again here, and ``lost``
    # called: the blocking read below would not end early then.
    read = streams.read_bands(client, consumer, shards, count=count, lost=lost)
    if read or block_ms is None:
        return read
    # Highest bands first: of streams filled at once (one move), Redis
    # serves a blocked reader the first it names.
    every = [bands[rank] for rank in range(len(BANDS)) for bands in shards]
    started = time.monotonic()
    try:
        with reads.reading(client) as reader:
            if reader is None:
                return []
            read = streams.read(
                reader, consumer, every, count=count, block_ms=block_ms, lost=lost
            )
    except RedisUnavailable:
        if reads.ended:
            return []  # ended by this worker's own stop: not an outage
        lost()
        raise
    early = time.monotonic() - started < block_ms / 1000 / 2
    if not read and early and not reads.ended:
        lost()
    return streams.by_band(read)


class StreamReaders:
    """One reader thread per shard, feeding a worker's backlog.

    :param shards: each shard's ready streams, highest band first.
    :param consumer_prefix: a reader of shard N is consumer
        ``<consumer_prefix>r<N>``.
    :param batch: how many entries a read takes at most, asked before each
        read (the next group's size, or the prefetch if more).
    :param backlog_limit: the backlog length at which readers stop reading.
    :param paused: the ready streams of the paused queues, which are not
        read (asked before each read).
    """

    def __init__(
        self,
        shards: Sequence[Sequence[str]],
        in_flight: InFlight,
        *,
        consumer_prefix: str,
        stopping: threading.Event,
        batch: Callable[[], int],
        backlog_limit: Callable[[], int],
        block_ms: int,
        reads: BlockingReads,
        lost: Callable[[], None],
        paused: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        self.in_flight = in_flight
        self.paused = paused
        self.stopping = stopping
        self.batch = batch
        self.backlog_limit = backlog_limit
        self.block_ms = block_ms
        self.reads = reads
        self.lost = lost
        self.shards = [tuple(bands) for bands in shards]
        self.consumers = {
            bands: f"{consumer_prefix}r{number}"
            for number, bands in enumerate(self.shards)
        }
        self._threads: list[threading.Thread] = []
        #: notified when worker threads take from the backlog
        self._room = threading.Event()

    def start(self) -> None:
        for number, bands in enumerate(self.shards):
            thread = threading.Thread(
                target=self._read,
                args=(bands,),
                name=f"delayq-reader-{number}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)

    def made_room(self) -> None:
        """Say that the backlog shrank (a worker thread took from it)."""
        self._room.set()

    def join(self) -> None:
        """Wait for the readers to see ``stopping`` (one blocking read)."""
        for thread in self._threads:
            thread.join(timeout=self.block_ms / 1000 + 5)

    def _read(self, bands: tuple[str, ...]) -> None:
        client = get_client("blocking")
        consumer = self.consumers[bands]
        # Capped low: a failing node costs a refused connection a second,
        # and its shard is read again soon after a failover.
        backoff = Backoff(f"worker {consumer}", logger, cap=1.0, again="reading again")
        while not self.stopping.is_set():
            if self.in_flight.waiting() >= self.backlog_limit():
                self._room.clear()
                # Re-checked after the clear: a take in between is not missed.
                if self.in_flight.waiting() >= self.backlog_limit():
                    self._room.wait(self.block_ms / 1000)
                continue
            if bands[0] in self.paused():
                # Its queue is paused: looked at again soon, read nothing.
                self.stopping.wait(PAUSED_WAIT)
                continue
            try:
                read = read_bands(
                    client,
                    consumer,
                    [bands],
                    count=self.batch(),
                    block_ms=self.block_ms,
                    reads=self.reads,
                    lost=self.lost,
                )
                backoff.answered()
            except RedisUnavailable as exc:
                self.stopping.wait(backoff.failed(exc))
                continue
            if read:
                self.in_flight.hold(read, consumer)
                self.in_flight.wait(read)


#: How often a reader of a paused queue's shard looks for its resume.
PAUSED_WAIT = 1.0

#: Entries taken over at most per scan of one stream.
RECLAIM_BATCH = 10


class Reclaimer:
    """The takeovers of one worker process, shared by its threads.

    Its threads look at most every half visibility timeout (at once again
    after a scan that found something), and each stream's scan goes on from
    where the last one stopped, so an old entry behind many live ones is
    reached too.
    """

    def __init__(self, stream_names: Sequence[str], visibility_timeout: float):
        self.visibility_timeout = visibility_timeout
        self._next = 0.0
        self._lock = threading.Lock()
        #: where each stream's scan goes on from
        self._cursors = {stream: "0-0" for stream in stream_names}

    def take(self, client: Client, consumer: str) -> list[streams.Entry]:
        """Entries idle past the visibility timeout, now ``consumer``'s; none
        if another thread looked a moment ago."""
        with self._lock:
            now = time.monotonic()
            if now < self._next:
                return []
            self._next = now + max(self.visibility_timeout / 2, 0.1)
        min_idle_ms = int(self.visibility_timeout * 1000)
        answers = Answers()
        for stream, start in list(self._cursors.items()):
            try:
                entries, cursor = streams.reclaim(
                    client,
                    stream,
                    consumer,
                    min_idle_ms=min_idle_ms,
                    count=RECLAIM_BATCH,
                    start=start,
                )
            except RedisUnavailable as exc:
                # On a Redis Cluster this stream's node may be failing over:
                # the others are still worth a look.
                answers.failed(exc)
                continue
            answers.answer()
            self._cursors[stream] = cursor
            if entries:
                logger.warning(
                    "worker %s: reclaimed %d entries idle over %.0f s in %s",
                    consumer,
                    len(entries),
                    self.visibility_timeout,
                    stream,
                )
                with self._lock:
                    self._next = 0.0  # there may be more
                return entries
        answers.raise_if_none_answered()
        return []
