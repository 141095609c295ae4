"""A django-health-check check: what ``manage.py delayq_status`` says.

Install the extra (``pip install "django-delayq[health]"``) and list the
check in the health-check view::

    from health_check.views import HealthCheckView

    path(
        "ht/",
        HealthCheckView.as_view(
            checks=["health_check.checks.Database", "django_delayq.health.DelayQueue"]
        ),
    )

The verdict is :func:`django_delayq.status.collect`'s, the same as the
command's exit code: healthy passes, degraded is a ``ServiceWarning``, down
a ``ServiceUnavailable``, each with the problems found.
"""

from __future__ import annotations

import dataclasses
import datetime

from django.db import close_old_connections
from health_check.base import HealthCheck
from health_check.exceptions import ServiceUnavailable, ServiceWarning

from . import status


@dataclasses.dataclass
class DelayQueue(HealthCheck):  # type: ignore[misc]  # untyped base
    """The deployment's health: Redis, the database, the dispatchers and
    workers by their heartbeats, overdue tasks and the outbox.

    :param overdue_after: seconds of lateness (and of outbox age) that make
        it degraded, as ``delayq_status --overdue``.
    """

    overdue_after: float = 60.0
    #: Past the database's and Redis' own short timeouts.
    timeout = datetime.timedelta(seconds=10)

    def run(self) -> None:
        try:
            report = status.collect(overdue_after=self.overdue_after)
        finally:
            # Run in a thread of the view's executor: leave no connection of
            # its own open past the database's limits.
            close_old_connections()
        problems = "; ".join(report.problems)
        if report.level == status.DOWN:
            raise ServiceUnavailable(f"down: {problems}")
        if report.level == status.DEGRADED:
            raise ServiceWarning(f"degraded: {problems}")
