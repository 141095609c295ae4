"""The database side of the dashboard: a handful of aggregate queries.

Every query but the status counts is bounded by the ``(status, run_at)``
index (overdue tasks, the next hour) or reads the small outbox table.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from django.db.models import Count, Min, Q
from django.db.models.functions import TruncMinute
from django.utils import timezone

from ..conf import get_settings
from ..models import DelayedTask, OutboxEntry, Status, read_db

#: A scheduled task this long past its run_at counts as overdue: dispatch and
#: claim normally take milliseconds, a busy worker pool a little longer.
OVERDUE_GRACE = datetime.timedelta(seconds=5)
#: Overdue tasks listed by name on the dashboard.
OVERDUE_LISTED = 10
#: Minutes ahead the "due per minute" chart covers.
CHART_MINUTES = 60


@dataclass
class QueueCounts:
    queue: str
    counts: list[int]  # one per status, in Status order
    total: int
    configured: bool


@dataclass
class DatabaseFigures:
    now: datetime.datetime
    queues: list[QueueCounts]
    totals: list[int]  # one per status
    total: int
    overdue: int
    #: tasks due that wait for a concurrency or rate limit (not overdue)
    waiting_for_limits: int
    oldest_overdue: datetime.datetime | None
    overdue_tasks: list[DelayedTask]
    outbox: int
    outbox_oldest: datetime.datetime | None
    outbox_backing_off: int
    chart_start: datetime.datetime
    due_per_minute: list[int] = field(default_factory=list)

    @property
    def worst_lateness(self) -> float | None:
        """Seconds the oldest overdue task is past its run_at."""
        if self.oldest_overdue is None:
            return None
        return (self.now - self.oldest_overdue).total_seconds()


def read(now: datetime.datetime | None = None) -> DatabaseFigures:
    now = timezone.now() if now is None else now
    # Where the other reports read (status, metrics): a replica, if the
    # router names one for reading.
    db = read_db()
    tasks = DelayedTask.objects.using(db)
    statuses = [status.value for status in Status]
    by_queue: dict[str, list[int]] = {}
    rows = tasks.order_by().values_list("queue", "status").annotate(n=Count("pk"))
    for queue, status, n in rows:
        counts = by_queue.setdefault(queue, [0] * len(statuses))
        if status in statuses:
            counts[statuses.index(status)] += n
    configured = list(get_settings().queues)
    names = configured + sorted(set(by_queue) - set(configured))
    queues = [
        QueueCounts(
            name,
            by_queue.get(name, [0] * len(statuses)),
            sum(by_queue.get(name, [])),
            name in configured,
        )
        for name in names
    ]
    totals = [sum(q.counts[i] for q in queues) for i in range(len(statuses))]

    overdue_rows = tasks.overdue(by=now, grace=OVERDUE_GRACE)
    overdue = overdue_rows.aggregate(n=Count("pk"), oldest=Min("run_at"))
    overdue_tasks = list(
        overdue_rows.order_by("run_at", "pk").only(
            "id", "name", "queue", "status", "run_at", "attempts", "max_attempts"
        )[:OVERDUE_LISTED]
    )

    outbox = (
        OutboxEntry.objects.using(db)
        .order_by()
        .aggregate(
            n=Count("pk"),
            oldest=Min("created_at"),
            backing_off=Count("pk", filter=Q(next_attempt_at__gt=now)),
        )
    )

    start = now.replace(second=0, microsecond=0)
    end = start + datetime.timedelta(minutes=CHART_MINUTES)
    due_per_minute = [0] * CHART_MINUTES
    minutes = (
        tasks.filter(status=Status.SCHEDULED, run_at__gte=start, run_at__lt=end)
        .annotate(minute=TruncMinute("run_at", tzinfo=datetime.UTC))
        .order_by()
        .values_list("minute")
        .annotate(n=Count("pk"))
    )
    for minute, n in minutes:
        index = int((minute - start).total_seconds() // 60)
        if 0 <= index < CHART_MINUTES:
            due_per_minute[index] += n

    return DatabaseFigures(
        now=now,
        queues=queues,
        totals=totals,
        total=sum(totals),
        overdue=overdue["n"],
        waiting_for_limits=tasks.waiting_for_limits(by=now).count(),
        oldest_overdue=overdue["oldest"],
        overdue_tasks=overdue_tasks,
        outbox=outbox["n"],
        outbox_oldest=outbox["oldest"],
        outbox_backing_off=outbox["backing_off"],
        chart_start=start,
        due_per_minute=due_per_minute,
    )
