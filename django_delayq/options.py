"""The options of a scheduling call, defined once.

:func:`django_delayq.schedule` spells them out as keyword arguments, so that
its signature documents them; :meth:`Task.schedule
<django_delayq.registry.Task.schedule>` takes them as ``**options`` typed by
:class:`ScheduleOptions`. A test checks that the two agree.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, TypedDict


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
