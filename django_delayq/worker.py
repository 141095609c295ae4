"""The worker: reads the ready streams and runs the tasks they name.

One :class:`Worker` per ``delayq_worker`` process, with ``concurrency``
threads. Each thread is a consumer of every shard's group and reads with a
blocking ``XREADGROUP`` (no polling). An entry is acknowledged and deleted
only after the task's outcome is committed; if the worker dies first, the
entry stays pending and another worker reclaims it with ``XAUTOCLAIM`` once
it has been idle for ``VISIBILITY_TIMEOUT``. A heartbeat keeps the entries of
tasks that are still running from looking idle.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from django.db import DatabaseError, connections

from . import registry
from .conf import get_settings
from .dbconn import recycle_connections
from .execution import Disposition, execute
from .store import streams
from .store.connection import get_client
from .store.keys import shard_keys
from .timing import retry_pause

logger = logging.getLogger(__name__)

#: Entries a thread reads from each stream at once, unless told otherwise.
DEFAULT_PREFETCH = 4

#: How long a read blocks on the server: also how long a graceful stop may
#: wait for an idle thread to notice it.
READ_BLOCK_MS = 5000


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
    :param prefetch: entries a thread reads from each ready stream at once;
        those it does not start at once wait (heartbeated) for the next free
        thread of this worker. More saves Redis round trips under load; fewer
        leaves more for other workers when tasks are long.
    :param visibility_timeout: seconds an entry may go without a heartbeat
        before another worker reclaims it; defaults to
        ``DELAYQ["VISIBILITY_TIMEOUT"]``.
    """

    def __init__(
        self,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 1,
        prefetch: int = DEFAULT_PREFETCH,
        visibility_timeout: float | None = None,
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
        if visibility_timeout is not None and not visibility_timeout > 0:
            raise ValueError(
                f"visibility_timeout must be a positive number of seconds; "
                f"got {visibility_timeout}."
            )
        self.visibility_timeout = (
            settings.visibility_timeout
            if visibility_timeout is None
            else visibility_timeout
        )
        self.name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        keys = [
            shard_keys(settings.key_prefix, queue.name, number)
            for queue in self.queues
            for number in range(queue.shards)
        ]
        self.streams = [k.ready for k in keys]
        self.dead = {k.ready: k.dead for k in keys}
        self.stats = WorkerStats()
        self._stats_lock = threading.Lock()
        self._stopping = threading.Event()
        #: stream -> entry id -> consumer, for the heartbeat
        self._in_flight: dict[str, dict[bytes, str]] = {s: {} for s in self.streams}
        self._in_flight_lock = threading.Lock()
        self._next_reclaim = 0.0
        self._reclaim_lock = threading.Lock()
        self._backlog: collections.deque[streams.Entry] = collections.deque()
        self._crashed = threading.Event()
        #: where each stream's reclaim scan goes on from
        self._reclaim_cursor = {stream: "0-0" for stream in self.streams}
        self._backlog_lock = threading.Lock()

    # -- public ---------------------------------------------------------------

    def run(self, *, once: bool = False) -> WorkerStats:
        """Work until :meth:`stop` (or, with ``once``, until nothing is ready)."""
        registry.autodiscover()
        client = get_client("loop")
        if not self._start(client, once):
            return self.stats
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
            )
            for n in range(self.concurrency)
        ]
        for thread in threads:
            thread.start()
        # The main thread keeps the heartbeat going, also while a graceful stop
        # lets the tasks in flight finish.
        beat = max(self.visibility_timeout / 3, 0.1)
        while alive := [t for t in threads if t.is_alive()]:
            alive[0].join(timeout=beat)
            self._heartbeat(client)
        self._requeue_backlog(client)
        self._leave_group(client, [f"{self.name}-{n}" for n in range(self.concurrency)])
        if self._crashed.is_set():
            raise RuntimeError(
                f"worker {self.name}: a thread stopped on an error (logged above)"
            )
        return self.stats

    def _start(self, client: redis.Redis, once: bool) -> bool:
        """Create the consumer groups, waiting for Redis if it is not up yet."""
        failures = 0
        while not self._stopping.is_set():
            try:
                streams.ensure_groups(client, self.streams)
                return True
            except redis.RedisError as exc:
                if once:
                    raise
                failures += 1
                pause = retry_pause(failures, base=0.5, cap=10.0)
                logger.warning(
                    "worker %s: Redis unavailable (%s); retrying in %.0f s",
                    self.name,
                    exc,
                    pause,
                )
                self._stopping.wait(pause)
        return False

    def _requeue_backlog(self, client: redis.Redis) -> None:
        """Give entries read but not started back to the other workers now."""
        with self._backlog_lock:
            left, self._backlog = self._backlog, collections.deque()
        for entry in left:
            self._done(entry)
        # A reclaimed entry stays pending (and is reclaimed again): only its
        # own delivery may take its attempt over.
        fresh = [entry for entry in left if not entry.reclaimed]
        if not fresh:
            return
        try:
            streams.requeue(client, fresh)
        except redis.RedisError as exc:
            # They stay pending and are reclaimed after the visibility timeout.
            logger.warning(
                "worker %s: could not requeue %d: %s", self.name, len(left), exc
            )

    def _leave_group(self, client: redis.Redis, consumers: list[str]) -> None:
        """Remove this worker's consumers that hold no pending entries."""
        try:
            streams.remove_idle_consumers(client, self.streams, consumers)
        except redis.RedisError as exc:
            logger.debug("worker %s: could not leave the groups: %s", self.name, exc)

    def stop(self) -> None:
        """Finish the tasks in flight, read nothing new, return from run()."""
        self._stopping.set()

    # -- one thread -------------------------------------------------------------

    def _consume(self, consumer: str, once: bool) -> None:
        client = get_client("blocking")
        failures = 0
        try:
            while not self._stopping.is_set():
                entry = None
                try:
                    entry = self._next(client, consumer, once)
                    if entry is None:
                        if once:
                            return
                        continue
                    self._handle(client, consumer, entry)
                    failures = 0
                except DatabaseError as exc:
                    if entry is not None:
                        # Keep it (heartbeated) and try it first once the
                        # database answers, instead of waiting for a reclaim.
                        with self._backlog_lock:
                            self._backlog.appendleft(entry)
                    failures += 1
                    self._pause(consumer, exc, failures)
                except Exception as exc:
                    if entry is not None:
                        self._done(entry)  # reclaimed later; the row decides
                    failures += 1
                    self._pause(consumer, exc, failures)
        except BaseException:
            self._crashed.set()
            logger.exception("worker %s: thread stopped by an error", consumer)
            raise
        finally:
            connections.close_all()

    def _pause(self, consumer: str, exc: Exception, failures: int) -> None:
        self._count("errors")
        pause = retry_pause(failures)
        if isinstance(exc, redis.RedisError | DatabaseError):
            logger.warning(
                "worker %s: %s: %s; retrying in %.1f s",
                consumer,
                type(exc).__name__,
                exc,
                pause,
            )
        else:
            logger.error(
                "worker %s: unexpected error; carrying on", consumer, exc_info=exc
            )
        self._stopping.wait(pause)

    def _next(
        self, client: redis.Redis, consumer: str, once: bool
    ) -> streams.Entry | None:
        """The next entry to run: from this process's backlog, or read anew.

        One read returns up to ``prefetch`` entries per stream. The first is
        run by the thread that read it; the others wait in a backlog any idle thread
        takes from, and count as in flight (heartbeated) from the moment
        they are read.
        """
        with self._backlog_lock:
            if self._backlog:
                return self._backlog.popleft()
        entries = self._reclaim(client, consumer)
        if not entries:
            entries = streams.read(
                client,
                consumer,
                self.streams,
                count=self.prefetch,
                block_ms=None if once else READ_BLOCK_MS,
            )
        if not entries:
            return None
        with self._in_flight_lock:
            for entry in entries:
                self._in_flight[entry.stream][entry.entry_id] = consumer
        with self._backlog_lock:
            self._backlog.extend(entries[1:])
        return entries[0]

    def _handle(self, client: redis.Redis, consumer: str, entry: streams.Entry) -> None:
        task_id = entry.task_id
        if task_id is None:
            logger.warning(
                "worker %s: dead-lettered a malformed entry %s in %s",
                consumer,
                entry.entry_id,
                entry.stream,
            )
            streams.dead_letter(
                client, self.dead[entry.stream], entry, "not a task id entry"
            )
            self._count("dead_lettered")
            self._done(entry)
            return
        # Drop connections that broke (or outlived a positive CONN_MAX_AGE)
        # before and after each task, but reuse healthy ones: see dbconn. A
        # database error propagates with the entry still in flight (see
        # _consume).
        recycle_connections()
        outcome = execute(
            task_id,
            entry_id=entry.entry_id.decode(),
            reclaimed=entry.reclaimed,
            early_wait=min(self.visibility_timeout / 3, 5.0),
        )
        recycle_connections()
        try:
            if outcome.disposition is Disposition.LEAVE:
                pass
            elif outcome.disposition is Disposition.DEAD:
                logger.warning(
                    "worker %s: dead-lettered task %s: %s",
                    consumer,
                    task_id,
                    outcome.reason,
                )
                streams.dead_letter(
                    client, self.dead[entry.stream], entry, outcome.reason
                )
                self._count("dead_lettered")
            else:
                streams.finish(client, entry.stream, entry.entry_id)
            self._count("processed")
        finally:
            # Even if the acknowledgement failed: the entry is then reclaimed
            # later, and the row (now finished) makes that a no-op.
            self._done(entry)

    def _done(self, entry: streams.Entry) -> None:
        with self._in_flight_lock:
            self._in_flight[entry.stream].pop(entry.entry_id, None)

    def _reclaim(self, client: redis.Redis, consumer: str) -> list[streams.Entry]:
        """Now and then, take over entries whose worker stopped heartbeating.

        Each stream's scan goes on from where the last one stopped, so an old
        entry behind many live ones is reached too.
        """
        with self._reclaim_lock:
            now = time.monotonic()
            if now < self._next_reclaim:
                return []
            self._next_reclaim = now + max(self.visibility_timeout / 2, 0.1)
        min_idle_ms = int(self.visibility_timeout * 1000)
        for stream in self.streams:
            entries, cursor = streams.reclaim(
                client,
                stream,
                consumer,
                min_idle_ms=min_idle_ms,
                count=10,
                start=self._reclaim_cursor[stream],
            )
            self._reclaim_cursor[stream] = cursor
            if entries:
                logger.warning(
                    "worker %s: reclaimed %d entries idle over %.0f s in %s",
                    consumer,
                    len(entries),
                    self.visibility_timeout,
                    stream,
                )
                self._count("reclaimed", len(entries))
                with self._reclaim_lock:
                    self._next_reclaim = 0.0  # there may be more
                return entries
        return []

    def _heartbeat(self, client: redis.Redis) -> None:
        with self._in_flight_lock:
            in_flight = {s: dict(e) for s, e in self._in_flight.items() if e}
        if not in_flight:
            return
        try:
            streams.heartbeat(client, in_flight)
        except redis.RedisError as exc:
            logger.warning("worker %s: heartbeat failed: %s", self.name, exc)

    def _count(self, field: str, amount: int = 1) -> None:
        with self._stats_lock:
            setattr(self.stats, field, getattr(self.stats, field) + amount)
