"""What a Celery-style task sees of its attempt, and the errors of the API.

``self.request`` is a :class:`Request`: the attempt under way in this
thread (a stack, for a task that calls another directly). :class:`Retry`
is what ``self.retry()`` raises; :class:`NotSupported` is the error of a
Celery feature django-delayq does not have.
"""

from __future__ import annotations

import datetime
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from ...exceptions import DelayQueueException

if TYPE_CHECKING:
    from ...models import DelayedTask


class Retry(Exception):
    """Raised by :meth:`CeleryTask.retry`: run the task again later."""

    def __init__(
        self,
        message: str | None = None,
        exc: BaseException | None = None,
        when: float | datetime.datetime | None = None,
    ) -> None:
        self.exc = exc
        self.when = when
        super().__init__(message or self._describe())

    def _describe(self) -> str:
        if isinstance(self.when, datetime.datetime):
            at = f"Retry at {self.when.isoformat()}"
        else:
            at = f"Retry in {self.when or 0:g}s"
        if self.exc is None:
            return at
        return f"{at}: {type(self.exc).__name__}: {self.exc}"

    def seconds(self) -> float:
        """Seconds from now until the retry."""
        when = self.when
        if isinstance(when, datetime.datetime):
            if timezone.is_naive(when):
                when = timezone.make_aware(when)
            return (when - timezone.now()).total_seconds()
        return float(when or 0)


class MaxRetriesExceededError(DelayQueueException):
    """``self.retry()`` was called with no retries left and no ``exc``."""


class NotSupported(DelayQueueException, NotImplementedError):
    """A Celery feature django-delayq does not have; the message says what
    to use instead."""


@dataclass
class Request:
    """``self.request`` of a bound task: the attempt that runs."""

    id: str | None
    task: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: retries before this attempt (its attempt number minus one)
    retries: int = 0
    #: when the task was due
    eta: datetime.datetime | None = None
    #: when it expires (None: never)
    expires: datetime.datetime | None = None
    #: the function was called directly, not run by a worker
    called_directly: bool = True
    is_eager: bool = False
    #: ``apply_async(headers=...)``: the task's metadata; None without any,
    #: as in Celery
    headers: dict[str, Any] | None = None

    @classmethod
    def of(cls, row: DelayedTask) -> Request:
        return cls(
            id=str(row.pk),
            task=row.name,
            args=list(row.args),
            kwargs=dict(row.kwargs),
            retries=max(row.attempts - 1, 0),
            eta=row.run_at,
            expires=row.expires_at,
            called_directly=False,
            headers=dict(row.meta) if row.meta else None,
        )


#: The attempts under way in this thread: the innermost last.
_local = threading.local()


def requests_under_way() -> list[Request]:
    stack: list[Request] | None = getattr(_local, "requests", None)
    if stack is None:
        stack = _local.requests = []
    return stack


def in_task() -> bool:
    """Whether this thread runs a Celery-style task's attempt now."""
    return any(not request.called_directly for request in requests_under_way())
