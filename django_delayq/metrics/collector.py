"""The backlog gauges, read from Redis and the database when scraped.

A Prometheus custom collector: nothing is read between scrapes, so a
process serving metrics sends Redis no command of its own while nobody
scrapes it. One scrape costs one Redis pipeline
(:func:`~django_delayq.store.stats.snapshot`, what ``delayq_status`` and
the dashboard read too) and five database queries (two grouped, the paused
queues, and the periodic schedules' overview), whatever the number of
shards.

When a store does not answer, its gauges are left out and
``delayq_up{store=...}`` is 0: an alert on that is more telling than a
scrape error.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from typing import Any

from django.db import DatabaseError, connections
from django.db.models import Count, Min, Q
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .. import registry
from ..conf import get_settings
from ..conf.limits import PERIODS_MS
from ..exceptions import RedisUnavailable
from ..limits.groups import limited_queues
from ..limits.usage import limit_states
from ..models import DelayedTask, OutboxEntry, PausedQueue, overdue_by, read_db
from ..recurring.overview import STATES, declared_names, schedule_states
from ..store import stats
from ..store.connection import get_client
from ..store.keys import LIMITS_SHARD

#: Scheduled tasks due longer ago than this count as overdue: the default
#: of ``delayq_status --overdue``.
OVERDUE_AFTER = 60.0

#: name -> help, for the per-queue gauges.
GAUGES = {
    "delayq_due_backlog": "Tasks in the due-sets (waiting for their run_at).",
    "delayq_ready_backlog": "Ready stream entries not yet taken by a worker.",
    "delayq_in_flight": "Ready stream entries taken by a worker, not finished.",
    "delayq_dead_letter_backlog": "Dead letters kept.",
    "delayq_unleased_shards": "Shards that no dispatcher leases.",
    "delayq_workers": "Live worker processes serving the queue.",
    "delayq_overdue_backlog": (
        f"Scheduled tasks due more than {OVERDUE_AFTER:g} s ago (not started)."
    ),
    "delayq_oldest_due_seconds": (
        "How long ago the most overdue scheduled task was due, tasks waiting "
        "for their limits left out (0: none due)."
    ),
    "delayq_outbox_backlog": "Outbox entries waiting for a replay into Redis.",
    "delayq_outbox_oldest_seconds": "Age of the oldest outbox entry (0: empty).",
    "delayq_queue_paused": (
        "1 while the queue is paused (delayq_queue pause): its due tasks wait, "
        "and count in the overdue backlog."
    ),
}

#: name -> (help, labels), for the periodic schedules' gauges.
PERIODIC_GAUGES = {
    "delayq_periodic_schedules": (
        "Periodic schedules by state (active, paused, removed).",
        ["state"],
    ),
    "delayq_periodic_behind": (
        "Active periodic schedules behind: not planned, or a tick not "
        "started, for more than 10 s.",
        [],
    ),
}


#: name -> help, for each limit's gauges (labels: queue, limit).
LIMIT_GAUGES = {
    "delayq_limit_running": "Tasks running (or admitted) under the limit.",
    "delayq_limit_waiting": "Tasks due that wait for the limit (not late).",
    "delayq_limit_keys_waiting": "limit_by values with tasks waiting.",
    "delayq_limit_concurrency": "The limit's concurrency_limit (absent: none).",
    "delayq_limit_rate_per_second": "The limit's rate_limit, per second.",
}

#: name -> help, for each limit's counters (kept in Redis, from its data's
#: start: a Redis that lost its data counts again from 0, as a restarted
#: process does).
LIMIT_COUNTERS = {
    "delayq_limit_admitted": "Tasks the limit admitted.",
    "delayq_limit_throttled": "Tasks that fell due and had to wait for the limit.",
    "delayq_limit_waited_seconds": "Seconds tasks waited for the limit, summed.",
}


class BacklogCollector(Collector):
    """Gauges per queue, read at scrape time.

    :param close_connections: close this thread's database connection after
        each scrape; for a metrics server, whose scrapes each run in a new
        thread (a request thread of Django closes its own).
    """

    def __init__(self, *, close_connections: bool = False) -> None:
        self.close_connections = close_connections

    def describe(self) -> Iterable[Metric]:
        # Registering a collector calls this instead of collect(): no I/O
        # until the first scrape.
        families = self._families()
        return [*families.values(), _up()]

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        up = _up()
        queues = list(get_settings().queues)
        up.add_metric(["redis"], float(self._read_redis(queues, families)))
        up.add_metric(["database"], float(self._read_database(queues, families)))
        yield from families.values()
        yield up

    def _families(self) -> dict[str, Any]:
        return {
            **{
                name: GaugeMetricFamily(name, text, labels=["queue", "limit"])
                for name, text in LIMIT_GAUGES.items()
            },
            **{
                name: CounterMetricFamily(name, text, labels=["queue", "limit"])
                for name, text in LIMIT_COUNTERS.items()
            },
            **{
                name: GaugeMetricFamily(name, text, labels=["queue"])
                for name, text in GAUGES.items()
            },
            **{
                name: GaugeMetricFamily(name, text, labels=labels)
                for name, (text, labels) in PERIODIC_GAUGES.items()
            },
        }

    def _read_redis(self, queues: list[str], families: dict[str, Any]) -> bool:
        settings = get_settings()
        try:
            client = get_client("schedule")
            registry.autodiscover()  # the tasks' limits
            limited = limited_queues(client)
            shards, live = stats.snapshot(
                client, settings.key_prefix, settings.queues.values(), limited
            )
            states = limit_states(client) if limited else []
        except RedisUnavailable:
            for name in [*_REDIS_GAUGES, *LIMIT_GAUGES, *LIMIT_COUNTERS]:
                del families[name]
            return False
        for state in states:
            labels = [state.queue, state.limit]
            families["delayq_limit_running"].add_metric(labels, state.running)
            families["delayq_limit_waiting"].add_metric(labels, state.waiting)
            families["delayq_limit_keys_waiting"].add_metric(labels, state.keys_waiting)
            if state.concurrency is not None:
                families["delayq_limit_concurrency"].add_metric(
                    labels, state.concurrency
                )
            if state.rate is not None:
                count, _, unit = state.rate.partition("/")
                families["delayq_limit_rate_per_second"].add_metric(
                    labels, int(count) * 1000 / PERIODS_MS[unit]
                )
            families["delayq_limit_admitted"].add_metric(labels, state.admitted)
            families["delayq_limit_throttled"].add_metric(labels, state.throttled)
            families["delayq_limit_waited_seconds"].add_metric(
                labels, state.waited_seconds
            )
        sums: dict[str, dict[str, int]] = {name: {} for name in _REDIS_GAUGES}
        for queue in queues:
            for values in sums.values():
                values[queue] = 0
        for shard in shards:
            sums["delayq_due_backlog"][shard.queue] += shard.due
            sums["delayq_ready_backlog"][shard.queue] += shard.waiting
            sums["delayq_in_flight"][shard.queue] += shard.pending
            sums["delayq_dead_letter_backlog"][shard.queue] += shard.dead
            sums["delayq_unleased_shards"][shard.queue] += shard.lease_holder is None
        for served in live.workers.values():
            for queue in set(served):
                if queue in sums["delayq_workers"]:
                    sums["delayq_workers"][queue] += 1
        for name, values in sums.items():
            for queue, value in values.items():
                families[name].add_metric([queue], float(value))
        return True

    def _read_database(self, queues: list[str], families: dict[str, Any]) -> bool:
        now = timezone.now()
        db = read_db()
        try:
            due = _by_queue(
                DelayedTask.objects.using(db)
                .due(by=now)
                .order_by()
                .values_list("queue")
                .annotate(
                    overdue=Count(
                        "pk",
                        filter=overdue_by(
                            now, datetime.timedelta(seconds=OVERDUE_AFTER)
                        ),
                    ),
                    # A task waiting for its limits is due, not late.
                    oldest=Min("run_at", filter=~Q(shard=LIMITS_SHARD)),
                )
            )
            outbox = _by_queue(
                OutboxEntry.objects.using(db)
                .order_by()
                .values_list("queue")
                .annotate(n=Count("pk"), oldest=Min("created_at"))
            )
            schedules = schedule_states(
                now, declared_names=declared_names(db), using=db
            )
            paused = set(PausedQueue.objects.using(db).values_list("name", flat=True))
        except DatabaseError:
            for name in _DATABASE_GAUGES:
                del families[name]
            return False
        finally:
            if self.close_connections:
                connections[db].close()
        for queue in sorted(set(queues) | paused):
            families["delayq_queue_paused"].add_metric([queue], int(queue in paused))
        for queue in sorted(set(queues) | set(due) | set(outbox)):
            overdue, oldest_due = due.get(queue, (0, None))
            entries, oldest_entry = outbox.get(queue, (0, None))
            families["delayq_overdue_backlog"].add_metric([queue], overdue)
            families["delayq_oldest_due_seconds"].add_metric(
                [queue], _age(now, oldest_due)
            )
            families["delayq_outbox_backlog"].add_metric([queue], entries)
            families["delayq_outbox_oldest_seconds"].add_metric(
                [queue], _age(now, oldest_entry)
            )
        for state in STATES:
            families["delayq_periodic_schedules"].add_metric(
                [state], sum(s.state == state for s in schedules)
            )
        families["delayq_periodic_behind"].add_metric(
            [], sum(s.behind(now) for s in schedules)
        )
        return True


_REDIS_GAUGES = (
    "delayq_due_backlog",
    "delayq_ready_backlog",
    "delayq_in_flight",
    "delayq_dead_letter_backlog",
    "delayq_unleased_shards",
    "delayq_workers",
)
_DATABASE_GAUGES = (
    "delayq_overdue_backlog",
    "delayq_oldest_due_seconds",
    "delayq_outbox_backlog",
    "delayq_outbox_oldest_seconds",
    "delayq_queue_paused",
    *PERIODIC_GAUGES,
)


def _up() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "delayq_up",
        "1 if the store answered the last scrape's reads, else 0.",
        labels=["store"],
    )


def _by_queue(
    rows: Iterable[tuple[str, int, datetime.datetime | None]],
) -> dict[str, tuple[int, datetime.datetime | None]]:
    return {queue: (count, oldest) for queue, count, oldest in rows}


def _age(now: datetime.datetime, moment: datetime.datetime | None) -> float:
    return 0.0 if moment is None else max((now - moment).total_seconds(), 0.0)
