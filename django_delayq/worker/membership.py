"""How a worker process joins and leaves: the consumer groups it reads
through, and the heartbeat in ``<prefix>:workers`` that says it is alive.

The heartbeat is the worker's own: Redis' consumer idle time grows while a
blocking read waits (Redis 7.0), so it cannot tell an idle worker from a
dead one. The dashboard and ``delayq_status`` read the heartbeats.

A heartbeat is written every third of the visibility timeout, so a Redis
that lost its data (a restart without persistence, ``FLUSHALL``, a
failover) would show no live worker for that long: the worker's threads
notice the loss at once (their reads fail, or end early) and ask for the
heartbeat to be written again right away (:meth:`Heartbeat.renew_soon`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence

from ..conf import get_settings
from ..exceptions import RedisUnavailable
from ..ownership import check_prefix_if_reachable
from ..store import leases, streams
from ..store.backoff import Backoff
from ..store.connection import Client
from ..store.errors import log_level
from ..store.keys import workers_key

logger = logging.getLogger(__name__)


#: While Redis does not answer, how often a heartbeat asked for is tried.
RENEW_RETRY_SECONDS = 1.0


def beat_seconds(visibility_timeout: float) -> float:
    """How often a worker's main thread heartbeats the entries in flight and
    the process itself: three beats fit in a visibility timeout."""
    return max(visibility_timeout / 3, 0.1)


def join(
    client: Client,
    name: str,
    stream_keys: Sequence[str],
    stopping: threading.Event,
    *,
    once: bool,
) -> bool:
    """Create the consumer groups, waiting for Redis if it is not up yet
    (with ``once``, raise instead); False if stopped while waiting."""
    backoff = Backoff(f"worker {name}", logger, base=0.5, cap=10.0, again=None)
    while not stopping.is_set():
        try:
            check_prefix_if_reachable()
            streams.ensure_groups(client, stream_keys)
            return True
        except RedisUnavailable as exc:
            if once:
                raise
            stopping.wait(backoff.failed(exc))
    return False


def leave(
    client: Client, name: str, stream_keys: Sequence[str], consumers: list[str]
) -> None:
    """Remove this worker's consumers that hold no pending entries."""
    try:
        streams.remove_idle_consumers(client, stream_keys, consumers)
    except RedisUnavailable as exc:
        logger.debug("worker %s: could not leave the groups: %s", name, exc)


class Heartbeat:
    """A worker process's entry in ``<prefix>:workers``."""

    def __init__(self, name: str, queues: Sequence[str], beat: float) -> None:
        self.name = name
        #: ``<name>#<queue>,<queue>``: who is alive, and for which queues (a
        #: worker that has read nothing yet has no consumer to tell)
        self.member = f"{name}#{','.join(queues)}"
        self.beat = beat
        self._asked = threading.Event()
        self._next_try = 0.0

    def renew_soon(self) -> None:
        """Ask for the heartbeat to be written at the next look of the main
        thread (:meth:`renew_if_asked`): Redis may have lost it. Any thread
        may ask."""
        self._asked.set()

    def renew_if_asked(self, client: Client) -> None:
        """Write the heartbeat if a thread asked for it; until it is written,
        try again at most every :data:`RENEW_RETRY_SECONDS`."""
        if not self._asked.is_set():
            return
        now = time.monotonic()
        if now < self._next_try:
            return
        self._next_try = now + RENEW_RETRY_SECONDS
        # Cleared first: a thread asking again meanwhile is not lost.
        self._asked.clear()
        if not self.alive(client):
            self._asked.set()

    def alive(self, client: Client) -> bool:
        """Renew the heartbeat; it lapses after three missed beats. False if
        Redis did not take it."""
        try:
            leases.beat(
                client,
                workers_key(get_settings().key_prefix),
                self.member,
                int(self.beat * 3 * 1000),
                prune=random.random() < 0.1,
            )
        except RedisUnavailable as exc:
            # Unwritten, it lapses: a denial says why the worker looks dead.
            logger.log(
                log_level(exc, logging.DEBUG),
                "worker %s: heartbeat not written: %s",
                self.name,
                exc,
            )
            return False
        return True

    def gone(self, client: Client) -> None:
        try:
            leases.leave(client, workers_key(get_settings().key_prefix), self.member)
        except RedisUnavailable as exc:
            logger.debug("worker %s: heartbeat not removed: %s", self.name, exc)
