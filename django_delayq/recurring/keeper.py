"""The thread that keeps the periodic schedules planned, in the processes
users already run: each ``delayq_dispatch`` and each looping
``delayq_sweep`` starts one.

It runs :func:`~.planner.plan` about once a second on a database
connection of its own. Planning never holds up the loop it lives in (a slow
or unreachable database only delays the ticks); a round that fails is
retried with a growing wait, logged once per outage.
"""

from __future__ import annotations

import logging
import threading

from django.db import DatabaseError, connections

from ..db.connections import recycle_connections
from ..exceptions import RedisUnavailable
from ..store.backoff import Backoff
from .planner import plan

logger = logging.getLogger(__name__)

#: Seconds between planning rounds: well inside the planner's lookahead.
INTERVAL = 1.0
#: How long stop() waits for a planning round under way.
STOP_WAIT = 5.0


class Keeper:
    """Plan the periodic schedules every :data:`INTERVAL` seconds until
    :meth:`stop`."""

    def __init__(self, who: str, interval: float = INTERVAL) -> None:
        self.who = who
        self.interval = interval
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"delayq-periodic-{self.who}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = STOP_WAIT) -> None:
        """Stop planning: wait up to ``timeout`` seconds for the round under
        way, so that the process that runs the keeper (a dispatcher, a
        sweeper) stops when asked even if that round waits on a database
        lock. A round cut short by the process's exit is only a round: the
        next planner, in any process, plans the same ticks again."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning(
                    "%s: the periodic planning round under way did not end "
                    "within %g s; not waiting for it",
                    self.who,
                    timeout,
                )

    def _run(self) -> None:
        backoff = Backoff(
            f"{self.who}: periodic schedules",
            logger,
            base=self.interval,
            cap=30.0,
            again="the database answers again",
            tries="planning round(s)",
        )
        try:
            while not self._stopping.is_set():
                # Kept open between rounds, as a worker keeps its own.
                recycle_connections()
                try:
                    plan()
                    backoff.answered()
                except (DatabaseError, RedisUnavailable) as exc:
                    # Redis only from the on-commit index writes of schedule_many,
                    # which send failures to the outbox; kept here for safety.
                    self._stopping.wait(backoff.failed(exc))
                    continue
                except Exception:
                    # A bug in one round must not end the schedules for good.
                    logger.exception("%s: a periodic planning round failed", self.who)
                    self._stopping.wait(backoff.failed(RuntimeError("planning failed")))
                    continue
                self._stopping.wait(self.interval)
        finally:
            connections.close_all()
