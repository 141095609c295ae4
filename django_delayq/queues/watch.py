"""What a worker process knows of the paused queues: the mirror, read at
most once per :data:`FRESH_FOR`, shared by the process's threads."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from django.db import DatabaseError

from ..conf import get_settings
from ..exceptions import RedisUnavailable
from ..store import pauses
from ..store.connection import Client
from .pausing import mirror

logger = logging.getLogger(__name__)

#: How long a worker trusts what it read: a pause reaches every worker
#: within this, plus the entries it read meanwhile (held back, unstarted).
FRESH_FOR = 0.5


class PauseWatch:
    """The paused queues among ``queues``, as of at most :data:`FRESH_FOR`
    ago: one ``HGETALL`` per refresh, by whichever thread asks first.

    A mirror Redis lost says nothing (see :mod:`django_delayq.store.pauses`):
    the rows are read then and the mirror written again from them, so a
    paused queue stays paused through a ``FLUSHALL``. When neither answers,
    what was known last holds: a worker without Redis reads nothing, and
    without the database claims nothing.
    """

    def __init__(self, client: Client, queues: Iterable[str]) -> None:
        self.client = client
        self.queues = frozenset(queues)
        self._paused: frozenset[str] = frozenset()
        self._next = 0.0
        #: whether a refresh ended (answered or not)
        self._known = False
        self._lock = threading.Lock()

    def paused(self) -> frozenset[str]:
        """The paused queues this worker serves."""
        if time.monotonic() < self._next:
            return self._paused
        # One thread refreshes; the others go on with what it knew a moment
        # ago (at most FRESH_FOR and one round trip old), rather than all
        # waiting and then rushing to Redis together. Before the first
        # answer nothing is known: they wait for it.
        if not self._lock.acquire(blocking=not self._known):
            return self._paused
        try:
            if time.monotonic() >= self._next:
                self._refresh()
        finally:
            self._lock.release()
        return self._paused

    def _refresh(self) -> None:
        try:
            self._paused = self._read() & self.queues
        except (RedisUnavailable, DatabaseError) as exc:
            logger.debug("paused queues not read: %s", exc)
        self._next = time.monotonic() + FRESH_FOR
        self._known = True

    def _read(self) -> frozenset[str]:
        seen = pauses.read(self.client, get_settings().key_prefix)
        if seen.paused is not None:
            return frozenset(seen.paused)
        # Lost or never written: the rows say, and the mirror is made again.
        rows, _ = mirror(self.client)
        return frozenset(rows)
