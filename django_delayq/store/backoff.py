"""How long a loop waits after errors in a row, and what it logs.

Every loop that talks to Redis and the database (the dispatcher, a
worker's threads and readers, the sweeper, a supervisor restarting a child)
keeps a :class:`Backoff`; the errors' kinds and text come from
:mod:`.errors`, beside it.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError

from ..exceptions import RedisUnavailable
from .errors import error_text, log_level


def retry_pause(failures: int, *, base: float = 0.1, cap: float = 5.0) -> float:
    """Seconds to wait after ``failures`` errors in a row: doubling, capped.

    The exponent is bounded too, so a long outage cannot overflow the float.
    """
    return float(min(base * 2 ** min(failures, 32), cap))


class Backoff:
    """Errors in a row of one loop: how long to wait after each, the line
    each logs, and the line that says the loop works again.

    Every loop of the package that retries (the dispatcher and each of its
    shards, its wake-up listeners, a worker's threads and readers, a worker
    joining its groups, the sweeper, a supervisor restarting a child) keeps
    one, so that they all wait, log and recover the same way.

    :param who: how the lines name the loop (``"dispatcher"``).
    :param logger: where the lines go; None logs nothing (the caller says
        more itself).
    :param base: the wait after the first error is twice this; each error
        in a row doubles it...
    :param cap: ...up to this (seconds).
    :param grace: errors in a row retried at once before the waits begin.
    :param level: how loudly an error is logged (an ACL denial is an error
        whatever this says, see :func:`~django_delayq.store.errors.log_level`).
    :param again: what the line logged on the first success after errors
        says (``"Redis answers again"``); None logs no such line.
    :param tries: what the errors were, in that line.
    """

    def __init__(
        self,
        who: str = "",
        logger: logging.Logger | None = None,
        *,
        base: float = 0.1,
        cap: float = 5.0,
        grace: int = 0,
        level: int = logging.WARNING,
        again: str | None = "Redis answers again",
        tries: str = "attempt(s)",
    ) -> None:
        self.who = who
        self.logger = logger
        self.base = base
        self.cap = cap
        self.grace = grace
        self.level = level
        self.again = again
        self.tries = tries
        #: errors in a row
        self.failures = 0

    def failed(
        self, exc: BaseException | None = None, *, cap: float | None = None
    ) -> float:
        """Count an error (``exc``, logged); the seconds to wait before the
        next try."""
        self.failures += 1
        counted = self.failures - self.grace
        pause = (
            retry_pause(counted, base=self.base, cap=self.cap if cap is None else cap)
            if counted > 0
            else 0.0
        )
        if self.logger is not None and exc is not None:
            if isinstance(exc, RedisUnavailable | DatabaseError):
                self.logger.log(
                    log_level(exc, self.level),
                    "%s: %s; retrying in %g s",
                    self.who,
                    error_text(exc),
                    pause,
                )
            else:
                self.logger.error(
                    "%s: unexpected error; carrying on", self.who, exc_info=exc
                )
        return pause

    def answered(self) -> None:
        """The loop works again: say so if it had failed, and start afresh."""
        if self.failures and self.logger is not None and self.again:
            self.logger.warning(
                "%s: %s, after %d failed %s",
                self.who,
                self.again,
                self.failures,
                self.tries,
            )
        self.failures = 0
