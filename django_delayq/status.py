"""The health of a deployment, as ``manage.py delayq_status`` reports it.

One read of the database (a few aggregate queries) and one of Redis (two
round trips), judged:

* **down** (2): Redis or the database does not answer;
* **degraded** (1): tasks overdue by more than a threshold, outbox entries
  older than it, a configured shard that no dispatcher leases, a queue that
  no live worker serves;
* **healthy** (0) otherwise.

Liveness comes from the processes' own heartbeats (the shard leases, and
``<prefix>:workers``), never from Redis' idle counters.
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import DatabaseError, router
from django.db.models import Count, Min, Q
from django.utils import timezone

from .conf import get_settings
from .exceptions import RedisUnavailable
from .models import DelayedTask, OutboxEntry, Status
from .store import stats
from .store.connection import get_client
from .store.errors import error_text

HEALTHY, DEGRADED, DOWN = 0, 1, 2
LEVELS = {HEALTHY: "healthy", DEGRADED: "degraded", DOWN: "down"}


@dataclass
class Shard:
    shard: str
    due: int
    next_due: str | None  # ISO time of the earliest due task
    waiting: int  # in the ready stream, not delivered yet
    in_flight: int  # delivered to a worker, not finished
    dead: int
    dispatcher: str | None


@dataclass
class Report:
    level: int = HEALTHY
    problems: list[str] = field(default_factory=list)
    database: str = "reachable"
    redis: str = "reachable"
    tasks: dict[str, int] = field(default_factory=dict)
    overdue: int = 0
    oldest_overdue: str | None = None
    outbox: int = 0
    oldest_outbox: str | None = None
    shards: list[Shard] = field(default_factory=list)
    dispatchers: dict[str, list[str]] = field(default_factory=dict)
    workers: dict[str, list[str]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return LEVELS[self.level]

    def flag(self, level: int, problem: str) -> None:
        self.level = max(self.level, level)
        self.problems.append(problem)

    def as_json(self) -> dict[str, Any]:
        return {"status": self.state, **asdict(self)}


def collect(
    overdue_after: float = 60.0, now: datetime.datetime | None = None
) -> Report:
    """Read and judge the deployment; ``overdue_after`` seconds of lateness
    (and of outbox age) make it degraded."""
    now = timezone.now() if now is None else now
    report = Report()
    _read_database(report, now, datetime.timedelta(seconds=overdue_after))
    _read_redis(report)
    return report


def _read_database(
    report: Report, now: datetime.datetime, threshold: datetime.timedelta
) -> None:
    db = router.db_for_read(DelayedTask)
    try:
        rows = DelayedTask.objects.using(db).order_by()
        report.tasks = {
            status: count
            for status, count in rows.values_list("status").annotate(n=Count("pk"))
        }
        late = rows.filter(status=Status.SCHEDULED, run_at__lt=now - threshold)
        overdue = late.aggregate(n=Count("pk"), oldest=Min("run_at"))
        outbox = (
            OutboxEntry.objects.using(db)
            .order_by()
            .aggregate(
                n=Count("pk"),
                oldest=Min("created_at"),
                stale=Count("pk", filter=Q(created_at__lt=now - threshold)),
            )
        )
    except DatabaseError as exc:
        report.database = f"unreachable: {type(exc).__name__}: {exc}"
        report.flag(DOWN, f"the database does not answer ({type(exc).__name__})")
        return
    report.overdue, report.outbox = overdue["n"], outbox["n"]
    report.oldest_overdue = _iso(overdue["oldest"])
    report.oldest_outbox = _iso(outbox["oldest"])
    seconds = int(threshold.total_seconds())
    if report.overdue:
        report.flag(
            DEGRADED,
            f"{report.overdue} task(s) overdue by more than {seconds} s "
            f"(the oldest was due at {report.oldest_overdue})",
        )
    stale_outbox = outbox["stale"]
    if stale_outbox:
        report.flag(
            DEGRADED,
            f"{stale_outbox} outbox entr{'y' if stale_outbox == 1 else 'ies'} "
            f"older than {seconds} s: Redis refused writes, and the sweeper has "
            f"not replayed them (is delayq_sweep running?)",
        )


def _read_redis(report: Report) -> None:
    settings = get_settings()
    try:
        client = get_client("schedule")
        shards = stats.read_shards(
            client, settings.key_prefix, settings.queues.values()
        )
        alive = stats.live_workers(client, settings.key_prefix)
    except RedisUnavailable as exc:
        report.redis = f"unreachable: {error_text(exc)}"
        report.flag(DOWN, f"Redis does not answer ({error_text(exc)})")
        return
    for state in shards:
        report.shards.append(
            Shard(
                shard=state.label,
                due=state.due,
                next_due=None
                if state.head_score is None
                else _iso(
                    datetime.datetime.fromtimestamp(
                        state.head_score / 1000, datetime.UTC
                    )
                ),
                waiting=state.waiting,
                in_flight=state.pending,
                dead=state.dead,
                dispatcher=state.lease_holder,
            )
        )
        if state.lease_holder:
            report.dispatchers.setdefault(state.lease_holder, []).append(state.label)
        else:
            report.flag(
                DEGRADED,
                f"no dispatcher leases shard {state.label} "
                f"(is delayq_dispatch running?)",
            )
    report.workers = alive
    served = {queue for queues in alive.values() for queue in queues}
    for queue in settings.queues:
        if queue not in served:
            report.flag(
                DEGRADED,
                f"no live worker serves queue {queue!r} (is delayq_worker running?)",
            )


def _iso(moment: datetime.datetime | None) -> str | None:
    return None if moment is None else moment.isoformat(timespec="milliseconds")
