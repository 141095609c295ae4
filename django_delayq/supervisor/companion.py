"""A process a ``delayq_worker`` supervisor keeps running beside its worker
processes: the one serving their metrics (``--metrics-port``).

Its owner starts it before the workers (it must not inherit them); the
supervisor watches its sentinel with the children's, and when it dies,
collects it (a zombie otherwise), logs why, and starts another: at once the
first time, then backing off like a worker process that keeps dying. The
workers never wait for it: a companion that cannot be started is tried again
later.
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Protocol

from ..store.backoff import Backoff

logger = logging.getLogger(__name__)

#: A child that dies unexpectedly is replaced after 1 s, then 2 s, 4 s...
#: up to this, so a crash loop (a broken deploy, a database refusing
#: connections) does not spin.
MAX_RESTART_DELAY = 30.0

#: A child that ran this long before dying starts the back-off afresh.
STABLE_AFTER = 60.0


def restart_backoff(*, grace: int = 0) -> Backoff:
    """The waits before restarting a child that keeps dying (or cannot be
    started): 1 s, 2 s, 4 s... up to :data:`MAX_RESTART_DELAY`, after
    ``grace`` restarts at once."""
    return Backoff(base=0.5, cap=MAX_RESTART_DELAY, grace=grace)


def describe_exit(code: int | None) -> str:
    """How a process ended, from its exit code, for the log."""
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


class Companion(Protocol):
    #: what the log calls it
    name: str

    @property
    def sentinel(self) -> int | None:
        """Ready once the process has exited; None when there is none."""

    def reap(self) -> tuple[int, int | None]:
        """Collect the exited process; its pid and exit code."""

    def restart(self) -> int:
        """Start another; its pid. Raises if it cannot (it is gone then)."""


class Keeper:
    """Restarts a :class:`Companion`; the supervisor says when it exited and
    when its restart is due."""

    def __init__(self, companion: Companion) -> None:
        self.companion = companion
        # deaths (or failed starts) in a row; the first is restarted at once
        self._backoff = restart_backoff(grace=1)
        self._started = time.monotonic()

    @property
    def sentinel(self) -> int | None:
        return self.companion.sentinel

    def exited(self) -> float:
        """Collect the companion that exited and log it; the seconds until
        its restart."""
        pid, code = self.companion.reap()
        lived = time.monotonic() - self._started
        if lived >= STABLE_AFTER:
            self._backoff.answered()
        delay = self._backoff.failed()
        logger.error(
            "delayq_worker: the %s (process %d) %s after %.1f s; restarting it in %g s",
            self.companion.name,
            pid,
            describe_exit(code),
            lived,
            delay,
        )
        return delay

    def restart(self) -> float | None:
        """Start another; None once started, else the seconds until the
        next try."""
        self._started = time.monotonic()
        try:
            pid = self.companion.restart()
        except Exception as exc:  # the workers go on; their metrics come back
            delay = self._backoff.failed()
            logger.error(
                "delayq_worker: the %s could not be restarted (%s); trying again "
                "in %g s",
                self.companion.name,
                exc,
                delay,
            )
            return delay
        logger.warning(
            "delayq_worker: the %s restarted (process %d)", self.companion.name, pid
        )
        return None
