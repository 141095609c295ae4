"""One checker for invariants I1-I7, shared by every fault scenario.

It reads the truth (task rows, the ``Ledger`` of executions that committed,
the outbox) and the index (every due-set and ready stream of the rig's
Redis), and reports every violation, not just the first:

* lost (I1): a committed task, not cancelled, that never ran;
* phantom (I2): an execution of a task whose transaction rolled back;
* early (I3): an execution that started before the row's ``run_at``;
* duplicate effects (I4): a key with more than one ledger row;
* executions beyond the first (I5): rows with ``attempts > 1``, at most as
  many as the scenario says were in flight when its faults hit;
* cancelled ran (I6): a task whose cancel committed, and whose run
  committed; or that started, though it was not cancelled while running;
* quiescence (I7): after the drain, no terminal (or unknown) id in a due-set
  or a ready stream, nothing pending, no outbox entry, no overdue row that
  is not terminal.

``record`` (and ``gated_record``) tasks are identified by their first
argument (the ledger key);
``poison`` tasks must end ``failed`` after all their attempts, with no effect.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from django_delayq.models import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    DelayedTask,
    OutboxEntry,
    Status,
)
from django_delayq.store.keys import decode_member
from django_delayq.store.streams import GROUP
from tests.faults.harness import SUMMARY, Rig
from tests.testapp.models import Ledger
from tests.testapp.tasks import gated_record, poison, record

RECORD = record.name
#: Tasks that note each execution in the ledger, under their first argument.
RECORDING = (RECORD, gated_record.name)
POISON = poison.name
#: Violations of one kind listed in a failure message; the rest are counted.
SHOWN = 5


@dataclass
class Expect:
    """What a scenario knows beyond the rows."""

    #: keys scheduled in transactions (or savepoints) that rolled back
    rolled_back: set[str] = field(default_factory=set)
    #: keys whose cancel() returned True (the cancel committed)
    cancelled: set[str] = field(default_factory=set)
    #: keys the scenario knows were committed: each must have a row
    committed: set[str] = field(default_factory=set)
    #: I5: how many tasks may have run more than once (the tasks in flight
    #: when the scenario's faults hit)
    max_extra: int = 0
    #: I1's lateness bound for this scenario, in seconds (None: not checked)
    max_lateness: float | None = None


@dataclass
class Report:
    tasks_run: int = 0
    #: rows with attempts > 1, and the attempts beyond the first they add up to
    extra: int = 0
    extra_attempts: int = 0
    worst_lateness: float = 0.0
    drain_seconds: float = 0.0
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, kind: str, detail: str) -> None:
        self.violations[kind].append(detail)

    def message(self) -> str:
        lines = []
        for kind, details in self.violations.items():
            lines.append(f"{kind}: {len(details)}")
            lines += [f"    {d}" for d in details[:SHOWN]]
            if len(details) > SHOWN:
                lines.append(f"    ... and {len(details) - SHOWN} more")
        return "\n".join(lines)


def _key(row: DelayedTask) -> str | None:
    if row.name in (*RECORDING, POISON) and row.args:
        return str(row.args[0])
    return None


# -- quiescence -------------------------------------------------------------------


def quiescence_problems(
    rig: Rig, *, until: datetime.datetime | None = None
) -> list[tuple[str, str]]:
    """What still keeps the system from being quiescent (I7), as (kind, detail).

    Active rows count if they are due by ``until`` (default: now).
    """
    problems: list[tuple[str, str]] = []
    now = timezone.now()
    try:
        overdue = list(
            DelayedTask.objects.filter(
                status__in=ACTIVE_STATUSES, run_at__lte=until or now
            )
            .values_list("pk", "status", "name", "run_at", "attempts")
            .order_by("run_at")
        )
        outbox = list(
            OutboxEntry.objects.values_list("task_id", "action", "last_error")
        )
    except DatabaseError as exc:
        return [("database unavailable", str(exc))]
    for pk, status, name, run_at, attempts in overdue:
        late = (now - run_at).total_seconds()
        problems.append(
            (
                "overdue non-terminal rows",
                f"{pk} {name} {status} attempts={attempts}, due {late:+.1f} s ago",
            )
        )
    for task_id, action, error in outbox:
        problems.append(("outbox entries", f"{action} {task_id}: {error}"))
    try:
        problems += _redis_problems(rig)
    except redis.RedisError as exc:
        problems.append(("redis unavailable", str(exc)))
    return problems


def _redis_problems(rig: Rig) -> list[tuple[str, str]]:
    client = rig.client
    named: dict[uuid.UUID, list[str]] = defaultdict(list)
    problems: list[tuple[str, str]] = []
    for keys in rig.shards():
        for due in keys.due_bands:
            for member, _score in client.zrange(due, 0, -1, withscores=True):
                try:
                    named[decode_member(member)].append(due)
                except ValueError:
                    problems.append(("malformed due-set members", f"{due}: {member!r}"))
        for ready in keys.ready_bands:
            problems += _stream_problems(client, ready, named)
    if not named:
        return problems
    statuses = dict(
        DelayedTask.objects.filter(pk__in=list(named)).values_list("pk", "status")
    )
    for task_id, places in named.items():
        status = statuses.get(task_id)
        for place in places:
            if status is None:
                problems.append(("ids without a row in Redis", f"{task_id} in {place}"))
            elif status in TERMINAL_STATUSES:
                problems.append(
                    ("terminal ids in Redis", f"{status} {task_id} in {place}")
                )
            elif ":ready" in place:
                problems.append(("active ids in a ready stream", f"{task_id} {place}"))
    return problems


def _stream_problems(
    client: redis.Redis, ready: str, named: dict[uuid.UUID, list[str]]
) -> list[tuple[str, str]]:
    """What a ready stream still holds: its ids go to ``named``."""
    problems = []
    for entry_id, fields in client.xrange(ready):
        where = f"{ready} entry {entry_id.decode()}"
        try:
            named[decode_member(fields.get(b"id", b""))].append(where)
        except ValueError:
            problems.append(("forged entries left in a ready stream", where))
    try:
        pending = client.xpending(ready, GROUP)["pending"]
    except redis.ResponseError:
        pending = 0  # no group (yet): nothing pending
    if pending:
        problems.append(("pending stream entries", f"{ready}: {pending}"))
    return problems


def _busy(until: datetime.datetime) -> bool:
    try:
        return (
            DelayedTask.objects.filter(
                status__in=ACTIVE_STATUSES, run_at__lte=until
            ).exists()
            or OutboxEntry.objects.exists()
        )
    except DatabaseError:
        return True


def drain(rig: Rig, seconds: float) -> float:
    """Wait until the system is quiescent (bounded); return the time it took.

    Quiescence is required twice in a row 0.3 s apart, so a moment between a
    dispatch and the worker's read does not count. When the time runs out the
    checker reports what is left.
    """
    start = time.monotonic()
    deadline = start + seconds
    # Tasks that fall due while we wait are part of the drain.
    until = timezone.now() + datetime.timedelta(seconds=seconds)
    calm = 0
    while time.monotonic() < deadline:
        # Cheap counts first: the full look at Redis reads every entry.
        if _busy(until) or quiescence_problems(rig, until=until):
            calm = 0
        else:
            calm += 1
            if calm == 2:
                break
        time.sleep(0.3)
    return time.monotonic() - start


# -- the checker --------------------------------------------------------------------


def check(
    rig: Rig,
    name: str,
    expect: Expect,
    *,
    drain_seconds: float = 60.0,
    notes: str | Callable[[], str] = "",
) -> Report:
    """Drain, then check I1-I7 and that no process died on its own; record the
    scenario's numbers (and ``notes``, called after the drain if callable) in
    the session summary; fail with every violation."""
    report = Report(drain_seconds=drain(rig, drain_seconds))
    rows = list(DelayedTask.objects.all())
    ledger = list(Ledger.objects.all())
    seen = _Seen(rows, ledger)
    _check_nothing_lost(report, expect, seen)  # I1
    _check_nothing_phantom(report, expect, seen)  # I2
    _check_never_early(report, expect, seen)  # I3
    _check_no_duplicate_effects(report, ledger, seen)  # I4
    _check_extra_executions(report, expect, rows)  # I5
    _check_cancelled_never_ran(report, expect, seen)  # I6
    # I7: quiescence.
    for kind, detail in quiescence_problems(rig):
        report.add(f"not quiescent after {report.drain_seconds:.0f} s: {kind}", detail)
    # The daemons survive the faults they are meant to survive.
    for detail in rig.dead_unexpectedly():
        report.add("process died", detail)

    report.tasks_run = len(ledger)
    line = (
        f"[{settings.TEST_DB}] {name}: {report.tasks_run} tasks run, "
        f"{report.extra} executions beyond the first "
        f"({report.extra_attempts} extra attempts), worst lateness "
        f"{report.worst_lateness:.3f} s, drained in {report.drain_seconds:.1f} s"
    )
    if callable(notes):
        notes = notes()
    if notes:
        line += f"; {notes}"
    if report.violations:
        line += f"; VIOLATIONS: {', '.join(report.violations)}"
    SUMMARY.append(line)
    assert not report.violations, f"{name}: invariants violated\n{report.message()}"
    return report


class _Seen:
    """The rows and the ledger's executions, by task key."""

    def __init__(self, rows: list[DelayedTask], ledger: list[Ledger]) -> None:
        self.runs: dict[str, list[Ledger]] = defaultdict(list)
        for entry in ledger:
            self.runs[entry.key].append(entry)
        self.by_key: dict[str, DelayedTask] = {}
        for row in rows:
            key = _key(row)
            if key is not None:
                self.by_key[key] = row


def _check_nothing_lost(report: Report, expect: Expect, seen: _Seen) -> None:
    by_key, runs = seen.by_key, seen.runs
    for key in sorted(expect.committed - set(by_key)):
        report.add("lost (committed, but no row)", key)
    now = timezone.now()
    for key, row in by_key.items():
        if row.name not in RECORDING or row.status == Status.CANCELLED or runs.get(key):
            continue
        if row.status in ACTIVE_STATUSES and row.run_at > now:
            continue  # not due yet
        report.add(
            "lost (never ran)",
            f"{key} {row.pk} {row.status} attempts={row.attempts} "
            f"run_at={row.run_at:%H:%M:%S.%f} {row.last_error[:120]}",
        )
    for key, row in by_key.items():
        if row.name == POISON and (
            row.status != Status.FAILED or row.attempts != row.max_attempts
        ):
            report.add(
                "poison task not failed after all attempts",
                f"{key} {row.status} attempts={row.attempts}/{row.max_attempts}",
            )


def _check_nothing_phantom(report: Report, expect: Expect, seen: _Seen) -> None:
    for key in sorted(expect.rolled_back & set(seen.by_key)):
        report.add("phantom rows (rolled back, yet stored)", key)
    for key in seen.runs:
        row = seen.by_key.get(key)
        if row is None or key in expect.rolled_back:
            report.add("phantom executions (no committed task)", key)
        elif row.name == POISON:
            report.add("effects of failed attempts committed", key)


def _check_never_early(report: Report, expect: Expect, seen: _Seen) -> None:
    late: list[str] = []
    for key, entries in seen.runs.items():
        row = seen.by_key.get(key)
        if row is None:
            continue
        for entry in entries:
            lateness = (entry.at - row.run_at).total_seconds()
            report.worst_lateness = max(report.worst_lateness, lateness)
            if lateness < 0:
                report.add("early", f"{key} started {-lateness * 1000:.1f} ms early")
            if expect.max_lateness is not None and lateness > expect.max_lateness:
                # Which task, and when: the processes' logs (printed at the
                # end of the test) then tell which path it took.
                late.append(
                    f"{lateness:.2f} s > {expect.max_lateness:g} s: {key} {row.pk} "
                    f"run_at={row.run_at:%H:%M:%S.%f} started={entry.at:%H:%M:%S.%f} "
                    f"pid={entry.pid} attempts={row.attempts}"
                )
    for detail in late:
        report.add("late beyond the scenario's bound", detail)


def _check_no_duplicate_effects(
    report: Report, ledger: list[Ledger], seen: _Seen
) -> None:
    for key, count in Counter(entry.key for entry in ledger).items():
        if count > 1:
            pids = [entry.pid for entry in seen.runs[key]]
            report.add("duplicate effects", f"{key} ran {count} times (pids {pids})")


def _check_extra_executions(
    report: Report, expect: Expect, rows: list[DelayedTask]
) -> None:
    """Executions beyond the first only for tasks in flight at a fault."""
    retried = [r for r in rows if r.name in RECORDING and r.attempts > 1]
    report.extra = len(retried)
    report.extra_attempts = sum(row.attempts - 1 for row in retried)
    if report.extra > expect.max_extra:
        report.add(
            "more executions beyond the first than tasks in flight at the faults",
            f"{report.extra} > {expect.max_extra}: "
            + ", ".join(f"{_key(r)} attempts={r.attempts}" for r in retried[:SHOWN]),
        )


#: The error of a row cancelled while it ran (``transitions.cancel_active``).
CANCELLED_WHILE_RUNNING = "cancelled while running (attempt "


def _check_cancelled_never_ran(report: Report, expect: Expect, seen: _Seen) -> None:
    """A committed cancel means the task's run never commits: cancelled
    before its claim, it never starts (I6); cancelled after it, the run is
    stopped, its writes roll back, and the row says it was cancelled while
    running."""
    by_key, runs = seen.by_key, seen.runs
    for key in sorted(expect.cancelled):
        row = by_key.get(key)
        if runs.get(key):
            report.add("cancelled, yet ran", f"{key} ran at {runs[key][0].at}")
        if row is not None and row.status != Status.CANCELLED:
            report.add("cancelled, yet not cancelled", f"{key} is {row.status}")
        if (
            row is not None
            and (row.attempts or row.started_at)
            and not row.last_error.startswith(CANCELLED_WHILE_RUNNING)
        ):
            report.add("cancelled, yet started", f"{key} attempts={row.attempts}")
    for key, row in by_key.items():
        if row.status == Status.CANCELLED and runs.get(key):
            report.add("cancelled row with an execution", key)
