"""What a worker holds: stream entries read and not yet finished.

An entry is *in flight* from the moment a thread reads it until its outcome
is committed and the entry acknowledged (or it is handed back). While in
flight it is heartbeated, so that no other worker reclaims it as the entry
of a dead worker. Entries read but not yet started wait in a *backlog* that
any idle thread of the worker takes from; they are not claimed yet, so they
cost their task nothing if the worker stops: :meth:`InFlight.hand_back`
returns them to the stream for the other workers at once. The backlog is
kept by priority band: a thread takes the highest band's entries first, in
the order they were read.

Entries of a paused queue (:mod:`django_delayq.queues`) are *held*: kept
in flight and heartbeated, out of the backlog, until a take finds their
queue running again and puts them back at the front of their band.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Iterable, Sequence

from ..exceptions import RedisUnavailable
from ..store import streams
from ..store.connection import Client
from ..store.keys import BANDS, stream_rank

logger = logging.getLogger(__name__)


class InFlight:
    """The in-flight entries and the backlog of one worker process."""

    def __init__(self, stream_names: Sequence[str]) -> None:
        #: stream -> entry id -> the consumer that holds it
        self._owners: dict[str, dict[bytes, str]] = {s: {} for s in stream_names}
        #: entries read and not started, one deque per band, highest first
        self._backlog = _bands()
        #: entries of paused queues, in the order they were read
        self._held: list[streams.Entry] = []
        self._lock = threading.Lock()
        #: notified when entries join the backlog
        self._arrived = threading.Condition(self._lock)

    def hold(self, entries: Iterable[streams.Entry], consumer: str) -> None:
        """Count freshly read entries as in flight, held by ``consumer``."""
        with self._lock:
            for entry in entries:
                self._owners[entry.stream][entry.entry_id] = consumer

    def take(
        self, count: int, paused: frozenset[str] = frozenset()
    ) -> list[streams.Entry]:
        """Up to ``count`` entries from the backlog, highest band first and
        oldest first within a band; none of the ``paused`` streams (those
        are held, see :meth:`hold_back`)."""
        with self._lock:
            return self._pop(count, paused)

    def _pop(self, count: int, paused: frozenset[str]) -> list[streams.Entry]:
        self._unhold(paused)
        taken: list[streams.Entry] = []
        for band in self._backlog:
            while band and len(taken) < count:
                entry = band.popleft()
                (self._held if entry.stream in paused else taken).append(entry)
        return taken

    def _unhold(self, paused: frozenset[str]) -> None:
        """Put the held entries of resumed queues back, at the front: they
        were read before anything in the backlog now."""
        if not self._held:
            return
        resumed = [e for e in self._held if e.stream not in paused]
        self._held = [e for e in self._held if e.stream in paused]
        for entry in reversed(resumed):
            self._backlog[stream_rank(entry.stream)].appendleft(entry)

    def take_arriving(
        self, count: int, timeout: float, paused: frozenset[str] = frozenset()
    ) -> list[streams.Entry]:
        """Like :meth:`take`, but wait up to ``timeout`` seconds for entries
        when it finds none (see :mod:`django_delayq.worker.readers`)."""
        with self._arrived:
            if taken := self._pop(count, paused):
                return taken
            self._arrived.wait(timeout)
            return self._pop(count, paused)

    def hold_back(self, entries: Iterable[streams.Entry]) -> None:
        """Keep entries of paused queues, read but not to be started yet
        (held in flight, heartbeated, until their queue is resumed)."""
        with self._lock:
            self._held.extend(entries)

    def waiting(self) -> int:
        """How many entries the backlog holds."""
        return sum(len(band) for band in self._backlog)

    def wait(self, entries: Iterable[streams.Entry]) -> None:
        """Put entries at the back of their band in the backlog, for any
        thread to take."""
        with self._arrived:
            for entry in entries:
                self._backlog[stream_rank(entry.stream)].append(entry)
            self._arrived.notify_all()

    def retry_first(self, entries: Sequence[streams.Entry]) -> None:
        """Put entries at the front of the backlog: they are tried first
        (after a database error cut their handling short)."""
        with self._arrived:
            for entry in reversed(entries):
                self._backlog[stream_rank(entry.stream)].appendleft(entry)
            self._arrived.notify_all()

    def release(self, entries: Iterable[streams.Entry]) -> None:
        """Entries finished with: no more heartbeats for them."""
        with self._lock:
            for entry in entries:
                self._owners[entry.stream].pop(entry.entry_id, None)

    def beat(self, client: Client, worker: str) -> None:
        """Reset the idle time of every entry in flight."""
        with self._lock:
            owners = {s: dict(e) for s, e in self._owners.items() if e}
        if not owners:
            return
        try:
            streams.heartbeat(client, owners)
        except RedisUnavailable as exc:
            logger.warning("worker %s: heartbeat failed: %s", worker, exc)

    def hand_back(self, client: Client, worker: str) -> None:
        """Give entries read but not started back to the other workers now."""
        with self._lock:
            left = [entry for band in self._backlog for entry in band]
            left += self._held
            self._backlog, self._held = _bands(), []
        self.release(left)
        # A reclaimed entry stays pending (and is reclaimed again): only its
        # own delivery may take its attempt over.
        fresh = [entry for entry in left if not entry.reclaimed]
        if not fresh:
            return
        try:
            streams.requeue(client, fresh)
        except RedisUnavailable as exc:
            # They stay pending and are reclaimed after the visibility timeout.
            logger.warning(
                "worker %s: could not requeue %d: %s", worker, len(left), exc
            )


def _bands() -> list[collections.deque[streams.Entry]]:
    return [collections.deque() for _ in BANDS]
