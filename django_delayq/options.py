"""The options of a scheduling call, defined once, and the bounds of those
that ``@task`` takes too.

:func:`django_delayq.schedule` spells them out as keyword arguments, so that
its signature documents them; :meth:`Task.schedule
<django_delayq.registry.Task.schedule>` takes them as ``**options`` typed by
:class:`ScheduleOptions`. A test checks that the two agree.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, TypedDict

from .exceptions import InvalidArgument


class ScheduleOptions(TypedDict, total=False):
    """The keyword arguments of :func:`django_delayq.schedule`."""

    args: Sequence[Any]
    kwargs: dict[str, Any] | None
    delay: float | datetime.timedelta | None
    eta: datetime.datetime | None
    queue: str | None
    key: str | None
    replace: bool
    max_attempts: int | None
    priority: int | None
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
