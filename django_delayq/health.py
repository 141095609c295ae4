"""django-health-check checks: is django-delayq reachable, and is it healthy.

Install the extra (``pip install "django-delayq[health]"``) and list the
checks in a health-check view (docs/howto/health-checks.md says which check suits
which probe)::

    from django_delayq.health import HealthCheckView

    ready = HealthCheckView.as_view(checks=["django_delayq.health.Reachable"])
    full = HealthCheckView.as_view(checks=["django_delayq.health.DelayQueue"])
    urlpatterns = [path("ht/ready/", ready), path("ht/", full)]

* :class:`Reachable`: Redis answers a ``PING`` and the database a one-row
  read of the task table. Nothing else: a readiness probe must not take a
  web process out of service because a worker is stopped.
* :class:`DelayQueue`: :func:`django_delayq.status.collect`'s verdict, as
  ``delayq_status`` gives it (healthy passes, degraded is a
  ``ServiceWarning``, down a ``ServiceUnavailable``), read the way a probe
  may: bounded queries on indexes, never a count of the whole task table.

django-health-check shows a check's message to whoever asks. These say only
what is wrong in general terms (no host, port, queue or error text); the
details (what ``delayq_status`` prints) go to staff users of
:class:`HealthCheckView`, and to nobody through django-health-check's own
view.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError, close_old_connections
from django.http import HttpRequest, HttpResponseBase
from health_check import views
from health_check.base import HealthCheck
from health_check.exceptions import ServiceUnavailable, ServiceWarning

from . import status
from .exceptions import RedisUnavailable
from .models import DelayedTask, read_db
from .store import stats
from .store.connection import get_client
from .store.errors import error_text

#: Where the details are, for those who do not see them.
_DETAILS = "details: manage.py delayq_status, or this page as a staff user"


@dataclasses.dataclass
class Reachable(HealthCheck):  # type: ignore[misc]  # untyped base
    """Redis and the database answer django-delayq: for a readiness probe.

    :param details: show the errors (set by :class:`HealthCheckView` for
        staff users; never shown in the check's name).
    """

    details: bool = dataclasses.field(default=False, repr=False)
    #: Past the database's and Redis' own short timeouts.
    timeout = datetime.timedelta(seconds=10)

    def run(self) -> None:
        down = []
        try:
            stats.ping(get_client("schedule"))
        except RedisUnavailable as exc:
            down.append(("Redis", error_text(exc)))
        try:
            # One row at most, on any index: the table is there and answers.
            db = read_db()
            DelayedTask.objects.using(db).order_by().values("pk")[:1].exists()
        except DatabaseError as exc:
            down.append(("the database", f"{type(exc).__name__}: {exc}"))
        finally:
            # Run in a thread of the view's executor: leave no connection of
            # its own open past the database's limits.
            close_old_connections()
        if down:
            raise ServiceUnavailable(
                "; ".join(
                    f"{store} does not answer" + (f" ({why})" if self.details else "")
                    for store, why in down
                )
                + ("" if self.details else f" ({_DETAILS})")
            )


@dataclasses.dataclass
class DelayQueue(HealthCheck):  # type: ignore[misc]  # untyped base
    """The deployment's health: Redis, the database, the dispatchers,
    workers and sweepers by their heartbeats, overdue tasks and the outbox.

    :param overdue_after: seconds of lateness (and of outbox age) that make
        it degraded, as ``delayq_status --overdue``.
    :param details: show the problems (set by :class:`HealthCheckView` for
        staff users; never shown in the check's name).
    """

    overdue_after: float = 60.0
    details: bool = dataclasses.field(default=False, repr=False)
    #: Past the database's and Redis' own short timeouts.
    timeout = datetime.timedelta(seconds=10)

    def run(self) -> None:
        try:
            report = status.collect(overdue_after=self.overdue_after, probe=True)
        finally:
            close_old_connections()  # as in Reachable.run
        if report.level == status.HEALTHY:
            return
        if self.details:
            message = "; ".join(report.problems)
        elif report.level == status.DOWN:
            message = " and ".join(
                f"{store} does not answer"
                for store, state in (
                    ("Redis", report.redis),
                    ("the database", report.database),
                )
                if state != "reachable"
            )
            message += f" ({_DETAILS})"
        else:
            message = f"{len(report.problems)} problem(s) ({_DETAILS})"
        if report.level == status.DOWN:
            raise ServiceUnavailable(f"down: {message}")
        raise ServiceWarning(f"degraded: {message}")


class HealthCheckView(views.HealthCheckView):  # type: ignore[misc]  # untyped
    """django-health-check's view, which shows staff users the details of
    django-delayq's checks (needs Django's ``AuthenticationMiddleware``;
    without it, nobody sees them)."""

    staff = False

    async def get(
        self, request: HttpRequest, *args: Any, **kwargs: Any
    ) -> HttpResponseBase:
        if hasattr(request, "auser"):
            user = await request.auser()
            self.staff = bool(user.is_active and user.is_staff)
        response: HttpResponseBase = await super().get(request, *args, **kwargs)
        return response

    def get_checks(self) -> Iterator[HealthCheck]:
        for check in super().get_checks():
            if self.staff and isinstance(check, Reachable | DelayQueue):
                check = dataclasses.replace(check, details=True)
            yield check
