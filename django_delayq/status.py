"""The health of a deployment, as ``manage.py delayq_status`` reports it.

One read of the database (a few aggregate queries) and one of Redis (two
round trips), judged:

* **down** (2): Redis or the database does not answer;
* **degraded** (1): tasks overdue by more than a threshold (a task that
  waits for a concurrency or rate limit is not late: it is counted apart,
  with each limit's use), outbox entries
  older than it, a configured shard that no dispatcher leases, a queue that
  no live worker serves, no sweeper that passed within a few of its
  intervals, a periodic schedule behind (see :mod:`.recurring.overview`);
* **healthy** (0) otherwise.

A paused queue (``delayq_queue pause``) is shown, as information, with its
tasks due meanwhile; those are not counted overdue: they wait by design.

Tasks that failed in the last hour are shown, as information: a task that
ran out of attempts is the application's to look at, not the queue's.

Liveness comes from the processes' own heartbeats (the shard leases,
``<prefix>:workers`` and ``<prefix>:sweepers``), never from Redis' idle
counters.

``probe=True`` (the health-check plugin, called on every request of a
probe) reads only what the verdict needs, with bounded queries on indexes:
no count of the whole task table, no count of the failures.
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import DatabaseError
from django.db.models import Count, QuerySet
from django.utils import timezone

from . import registry
from .conf import get_settings
from .exceptions import RedisUnavailable
from .limits.groups import limited_queues
from .limits.usage import LimitState, limit_states
from .models import DelayedTask, OutboxEntry, PausedQueue, Status, read_db
from .recurring.overview import (
    BEHIND_AFTER,
    ScheduleState,
    declared_names,
    schedule_states,
)
from .store import stats
from .store.connection import get_client
from .store.errors import error_text
from .store.stats import MISSED_PASSES, pass_ttl

HEALTHY, DEGRADED, DOWN = 0, 1, 2
LEVELS = {HEALTHY: "healthy", DEGRADED: "degraded", DOWN: "down"}

#: The most rows a probe counts of overdue tasks or outbox entries: past
#: this it says "at least", and a backlog costs it no more.
PROBE_LIMIT = 1000

#: How far back the failed tasks are counted.
FAILED_WINDOW = datetime.timedelta(hours=1)

#: The most schedules a problem names; the others are counted.
NAMED = 5


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
class SweeperState:
    interval: float  # seconds between its passes
    last_pass: str  # ISO time its last pass ended (Redis' clock)


@dataclass
class Periodic:
    name: str
    state: str  # active, paused, removed
    behind: bool
    planned_through: str | None  # ISO; None: never planned
    late_ticks: int  # scheduled more than a few seconds past their run_at
    oldest_late_tick: str | None


@dataclass
class Paused:
    queue: str
    paused_at: str | None
    paused_by: str
    reason: str
    #: its tasks due now, waiting for the resume
    due: int


@dataclass
class Report:
    level: int = HEALTHY
    problems: list[str] = field(default_factory=list)
    database: str = "reachable"
    redis: str = "reachable"
    tasks: dict[str, int] = field(default_factory=dict)
    #: tasks that ended failed in the last hour (None: not read, a probe)
    failed_last_hour: int | None = None
    overdue: int = 0
    oldest_overdue: str | None = None
    outbox: int = 0
    oldest_outbox: str | None = None
    shards: list[Shard] = field(default_factory=list)
    dispatchers: dict[str, list[str]] = field(default_factory=dict)
    workers: dict[str, list[str]] = field(default_factory=dict)
    sweepers: dict[str, SweeperState] = field(default_factory=dict)
    periodic: list[Periodic] = field(default_factory=list)
    #: tasks due that wait for a concurrency or rate limit (not overdue)
    waiting_for_limits: int = 0
    #: each limit's use (see django_delayq.limits.usage)
    limits: list[LimitState] = field(default_factory=list)
    #: the paused queues (see django_delayq.queues)
    paused: list[Paused] = field(default_factory=list)

    @property
    def state(self) -> str:
        return LEVELS[self.level]

    def flag(self, level: int, problem: str) -> None:
        self.level = max(self.level, level)
        self.problems.append(problem)

    def as_json(self) -> dict[str, Any]:
        return {"status": self.state, **asdict(self)}


def collect(
    overdue_after: float = 60.0,
    now: datetime.datetime | None = None,
    *,
    probe: bool = False,
) -> Report:
    """Read and judge the deployment; ``overdue_after`` seconds of lateness
    (and of outbox age) make it degraded. ``probe``: read only what the
    verdict needs (see the module docstring)."""
    now = timezone.now() if now is None else now
    report = Report()
    _read_database(report, now, datetime.timedelta(seconds=overdue_after), probe)
    _read_redis(report, probe)
    return report


def _count(rows: QuerySet[Any], limit: int | None) -> int:
    """``rows.count()``, stopping at ``limit`` rows if given."""
    return rows.count() if limit is None else rows.values("pk")[:limit].count()


def _read_database(
    report: Report,
    now: datetime.datetime,
    threshold: datetime.timedelta,
    probe: bool,
) -> None:
    db = read_db()
    limit = PROBE_LIMIT if probe else None
    try:
        rows = DelayedTask.objects.using(db).order_by()
        if not probe:
            report.tasks = {
                status: count
                for status, count in rows.values_list("status").annotate(n=Count("pk"))
            }
            # On the (status, finished_at) index: as cheap as the failures.
            report.failed_last_hour = rows.filter(
                status=Status.FAILED, finished_at__gte=now - FAILED_WINDOW
            ).count()
        paused = list(PausedQueue.objects.using(db).order_by("name")[:limit])
        # Both on the (status, run_at) index.
        late = rows.overdue(by=now, grace=threshold)
        if paused:  # their tasks wait by design
            late = late.exclude(queue__in=[p.name for p in paused])
        waiting_paused = (
            {
                queue: n
                for queue, n in rows.filter(
                    status=Status.SCHEDULED,
                    run_at__lte=now,
                    queue__in=[p.name for p in paused],
                )
                .values_list("queue")
                .annotate(n=Count("pk"))
            }
            if paused and not probe
            else {}
        )
        overdue = _count(late, limit)
        waiting = _count(rows.waiting_for_limits(by=now), limit)
        oldest = late.order_by("run_at").values_list("run_at", flat=True).first()
        entries = OutboxEntry.objects.using(db).order_by()
        outbox = _count(entries, limit)
        stale_outbox = _count(entries.filter(created_at__lt=now - threshold), limit)
        oldest_outbox = (
            entries.order_by("created_at").values_list("created_at", flat=True).first()
            if outbox
            else None
        )
        states = schedule_states(
            now,
            declared_names=() if probe else declared_names(),
            using=db,
            limit=limit,
        )
    except DatabaseError as exc:
        report.database = f"unreachable: {type(exc).__name__}: {exc}"
        report.flag(DOWN, f"the database does not answer ({type(exc).__name__})")
        return
    report.overdue, report.outbox = overdue, outbox
    report.paused = [
        Paused(
            p.name,
            _iso(p.paused_at),
            p.paused_by,
            p.reason,
            waiting_paused.get(p.name, 0),
        )
        for p in paused
    ]
    report.waiting_for_limits = waiting
    report.oldest_overdue = _iso(oldest)
    report.oldest_outbox = _iso(oldest_outbox)
    seconds = int(threshold.total_seconds())
    if report.overdue:
        report.flag(
            DEGRADED,
            f"{_at_least(report.overdue, limit)} task(s) overdue by more than "
            f"{seconds} s (the oldest was due at {report.oldest_overdue})",
        )
    if stale_outbox:
        report.flag(
            DEGRADED,
            f"{_at_least(stale_outbox, limit)} outbox "
            f"entr{'y' if stale_outbox == 1 else 'ies'} "
            f"older than {seconds} s: Redis refused writes, and the sweeper has "
            f"not replayed them (is delayq_sweep running?)",
        )
    _judge_periodic(report, states, now, limit)


def _judge_periodic(
    report: Report,
    states: list[ScheduleState],
    now: datetime.datetime,
    limit: int | None,
) -> None:
    report.periodic = [
        Periodic(
            name=state.name,
            state=state.state,
            behind=state.behind(now),
            planned_through=_iso(state.planned_through),
            late_ticks=state.late_ticks,
            oldest_late_tick=_iso(state.oldest_late_tick),
        )
        for state in states
    ]
    seconds = int(BEHIND_AFTER.total_seconds())
    unplanned = [state.name for state in states if state.unplanned(now)]
    if unplanned:
        report.flag(
            DEGRADED,
            f"{_at_least(len(unplanned), limit)} periodic schedule(s) not "
            f"planned for more than {seconds} s ({_names(unplanned)}): nothing "
            f"writes their ticks (is delayq_dispatch, or delayq_sweep without "
            f"--once, running?)",
        )
    late = [
        state.name
        for state in states
        if state.state == "active" and state.late_ticks and not state.unplanned(now)
    ]
    if late:
        report.flag(
            DEGRADED,
            f"{_at_least(len(late), limit)} periodic schedule(s) with ticks "
            f"not started more than {seconds} s after their time "
            f"({_names(late)}): is delayq_dispatch running, and delayq_worker "
            f"for their queues?",
        )


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:NAMED])
    return shown + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


def _at_least(count: int, limit: int | None) -> str:
    return f"at least {count}" if count == limit else str(count)


def _read_redis(report: Report, probe: bool = False) -> None:
    settings = get_settings()
    try:
        client = get_client("schedule")
        registry.autodiscover()  # the tasks' limits
        limited = limited_queues(client)
        shards, live = stats.snapshot(
            client, settings.key_prefix, settings.queues.values(), limited
        )
        # Each limit's use reads every waiting line: not for a probe.
        report.limits = limit_states(client) if limited and not probe else []
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
    report.workers = live.workers
    served = {queue for queues in live.workers.values() for queue in queues}
    for queue in settings.queues:
        if queue not in served:
            report.flag(
                DEGRADED,
                f"no live worker serves queue {queue!r} (is delayq_worker running?)",
            )
    for sweeper in live.sweepers:
        ended_ms = sweeper.expires_ms - pass_ttl(sweeper.interval) * 1000
        report.sweepers[sweeper.token] = SweeperState(
            interval=sweeper.interval,
            last_pass=datetime.datetime.fromtimestamp(
                ended_ms / 1000, datetime.UTC
            ).isoformat(timespec="milliseconds"),
        )
    if not live.sweepers:
        report.flag(
            DEGRADED,
            f"no sweeper has ended a pass within {MISSED_PASSES} of its "
            "intervals: nothing replays the outbox or repairs Redis after a "
            "data loss (run delayq_sweep)",
        )


def _iso(moment: datetime.datetime | None) -> str | None:
    return None if moment is None else moment.isoformat(timespec="milliseconds")
