"""Taking over the stream entries of workers that stopped heartbeating.

A worker heartbeats every entry it holds (:mod:`django_delayq.inflight`). An
entry idle for longer than the visibility timeout belongs to a worker that
died or is paused (or to a supervised worker process whose rescue could not
finish, see :mod:`django_delayq.rescue`): any thread of any worker may take
it over with ``XAUTOCLAIM``, and the row then decides what the takeover may
do (:func:`django_delayq.transitions.claim`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from .exceptions import RedisUnavailable
from .store import streams
from .store.connection import Client

logger = logging.getLogger(__name__)

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
        error: RedisUnavailable | None = None
        answered = False
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
                error = exc
                continue
            answered = True
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
        if error is not None and not answered:
            raise error
        return []
