"""The options of a scheduling call and of a task, each defined once.

:func:`django_delayq.schedule` spells the scheduling options out as keyword
arguments, so that its signature documents them; :meth:`Task.schedule
<django_delayq.registry.Task.schedule>` takes them as ``**options`` typed by
:class:`ScheduleOptions`. A test checks that the two agree.

The options of a task are :class:`TaskOptions`, with their defaults and
their validation: ``@task`` and ``@periodic`` spell them out as keyword
arguments too (a test checks that they agree with it), a
``DELAYQ["PERIODIC"]`` entry and the Django Tasks backend's ``OPTIONS``
take some of them.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from .conf.limits import concurrency_problem, limit_by_problem, rate_problem
from .conf.schema import MAX_TIME_LIMIT
from .exceptions import InvalidArgument, InvalidPayload, InvalidTaskDefinition
from .payload import check_meta
from .text import check_text


class ScheduleOptions(TypedDict, total=False):
    """The keyword arguments of :func:`django_delayq.schedule`."""

    args: Sequence[Any]
    kwargs: dict[str, Any] | None
    delay: float | datetime.timedelta | None
    eta: datetime.datetime | None
    expires: float | datetime.timedelta | datetime.datetime | None
    queue: str | None
    key: str | None
    replace: bool
    max_attempts: int | None
    priority: int | None
    meta: Mapping[str, Any] | None
    using: str | None


#: The most attempts a task may have (the same bound as the setting's).
MAX_ATTEMPTS_LIMIT = 1000


def validate_max_attempts(value: object, *, where: str) -> int:
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not 1 <= value <= MAX_ATTEMPTS_LIMIT
    ):
        raise InvalidArgument(
            f"{where} must be an integer from 1 (no retries) to "
            f"{MAX_ATTEMPTS_LIMIT}; got {value!r}."
        )
    return value


#: The priorities a task may have: Django's Tasks range.
MIN_PRIORITY, MAX_PRIORITY = -100, 100


def validate_priority(value: object, *, where: str) -> int:
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not MIN_PRIORITY <= value <= MAX_PRIORITY
    ):
        raise InvalidArgument(
            f"{where} must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY} "
            f"(higher starts first; 0 is the default); got {value!r}."
        )
    return value


#: The longest task name a row holds.
MAX_NAME_LENGTH = 200


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """The options of ``@task`` (see :func:`django_delayq.task`), with their
    defaults; :meth:`checked` validates them."""

    name: str | None = None
    queue: str | None = None
    max_attempts: int | None = None
    atomic: bool = True
    time_limit: float | None = None
    priority: int = 0
    concurrency_limit: int | None = None
    rate_limit: str | None = None
    limit_by: str | Callable[..., Any] | None = None
    meta: Mapping[str, Any] | None = None

    def checked(self) -> TaskOptions:
        """Return these options, the time limit as a float and the metadata
        as stored (None for none); raise
        :class:`~django_delayq.exceptions.InvalidTaskDefinition` naming the
        first bad one as ``@task(option=...)``."""
        for option in TASK_OPTIONS:
            problem = task_option_problem(
                option, getattr(self, option), where=f"@task({option}=...)"
            )
            if problem is not None:
                raise InvalidTaskDefinition(problem)
        if (
            self.limit_by is not None
            and self.concurrency_limit is None
            and self.rate_limit is None
        ):
            raise InvalidTaskDefinition(
                "@task(limit_by=...) says what a limit is counted per, but the "
                "task has no limit: add concurrency_limit=... or rate_limit=...."
            )
        return dataclasses.replace(
            self,
            time_limit=None if self.time_limit is None else float(self.time_limit),
            meta=check_meta(self.meta) or None,
        )

    def arguments(self) -> dict[str, Any]:
        """The options as keyword arguments of :class:`~django_delayq.registry.Task`."""
        return {option: getattr(self, option) for option in TASK_OPTIONS}


def task_option_problem(option: str, value: object, *, where: str) -> str | None:
    """What is wrong with ``value`` for the task option ``option``, as a
    message naming ``where``; None if it is valid."""
    return _CHECKS[option](value, where)


def _name_problem(value: object, where: str) -> str | None:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_LENGTH:
        return (
            f"{where} must be a non-empty string of at most "
            f"{MAX_NAME_LENGTH} characters; got {value!r}."
        )
    try:
        check_text(value, where, InvalidTaskDefinition)
    except InvalidTaskDefinition as exc:
        return str(exc)
    return None


def _queue_problem(value: object, where: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        return f"{where} must be a queue name; got {value!r}."
    return None


def _max_attempts_problem(value: object, where: str) -> str | None:
    if value is None:
        return None  # DELAYQ["MAX_ATTEMPTS"]
    try:
        validate_max_attempts(value, where=where)
    except InvalidArgument as exc:
        return str(exc)
    return None


def _priority_problem(value: object, where: str) -> str | None:
    try:
        validate_priority(value, where=where)
    except InvalidArgument as exc:
        return str(exc)
    return None


def _atomic_problem(value: object, where: str) -> str | None:
    if not isinstance(value, bool):
        return f"{where} must be True or False; got {value!r}."
    return None


def _time_limit_problem(value: object, where: str) -> str | None:
    if value is not None and (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not 0 < value <= MAX_TIME_LIMIT
    ):
        return (
            f"{where} must be a number of seconds, more than 0 and at most "
            f"{MAX_TIME_LIMIT:g}, or None; got {value!r}."
        )
    return None


def _meta_problem(value: object, where: str) -> str | None:
    try:
        check_meta(value)
    except InvalidPayload as exc:
        return f"{where}: {exc}"
    return None


#: Each task option's check, in the order ``@task`` checks them.
_CHECKS: dict[str, Callable[[object, str], str | None]] = {
    "name": _name_problem,
    "queue": _queue_problem,
    "max_attempts": _max_attempts_problem,
    "priority": _priority_problem,
    "atomic": _atomic_problem,
    "time_limit": _time_limit_problem,
    "concurrency_limit": concurrency_problem,
    "rate_limit": rate_problem,
    "limit_by": limit_by_problem,
    "meta": _meta_problem,
}

#: The names of the task options, in the order they are checked.
TASK_OPTIONS = tuple(_CHECKS)


# -- what a failed attempt leads to, when the task decides -----------------------
#
# By default a failed attempt is retried after an exponential backoff while the
# row has attempts left (django_delayq.outcomes.retry_delay). A task class may
# decide otherwise per failure, through Task.next_attempt(): fail at once, retry
# after a delay of its own, or retry beyond the row's max_attempts. The Celery
# kit (django_delayq.contrib.celery) does, for self.retry() and autoretry_for.


@dataclasses.dataclass(frozen=True)
class NextAttempt:
    """A task's decision on one failed attempt."""

    #: how long until the next attempt; None: no retry, the task fails now
    delay: datetime.timedelta | None
    #: the row's new attempt budget, when this retry goes beyond the old one
    max_attempts: int | None = None


#: No retry: the task fails with this attempt's error.
FAIL_NOW = NextAttempt(delay=None)


def retry_after(seconds: float, *, max_attempts: int | None = None) -> NextAttempt:
    """Retry after ``seconds``, raising the row's budget to ``max_attempts``."""
    return NextAttempt(datetime.timedelta(seconds=max(seconds, 0.0)), max_attempts)
