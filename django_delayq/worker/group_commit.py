"""Group commit: run several claimed tasks in one transaction.

Per task, the work a worker does around a trivial function is mostly round
trips: a claim, a commit, a success UPDATE, another commit, an
acknowledgement. A group amortises them: its tasks were claimed in one
statement (:func:`django_delayq.transitions.claim_due`), their functions
run in one transaction, each inside a savepoint of its own, their successes
are recorded in one statement and committed once, and the worker then
acknowledges all their stream entries in one round trip.

What still holds, task by task:

* a task's own writes and its success record commit together (a database
  only task takes effect exactly once);
* a task that raises rolls back its savepoint only: its neighbours' work is
  kept, and its failure (retry or failed) is recorded in the same commit;
* if any success is fenced (this worker was paused past its visibility
  timeout and another worker took an attempt over), the whole group rolls
  back, and each task that ran is run again on its own, fenced on its own,
  so a stale attempt never takes effect and the others still do;
* a slow task does not hold its neighbours' commits for long: a group
  closes when its time budget is spent, and tasks that have been slow run
  alone (see :class:`Pacer`).
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, connections, transaction
from django.utils import timezone

from .. import registry, transitions
from ..db.savepoints import TaskSavepoints, TransactionLost
from ..exceptions import TaskCancelled
from ..limits.slots import note_start
from ..models import DelayedTask
from ..outcomes import Verdict, expire, record_failure, report_start, report_success
from .attempts import (
    FAILURES,
    Fenced,
    expired,
    failure_text,
    refusal,
    refuse,
    run_attempt,
    stored_value,
    time_limit_of,
)
from .execution import run_alone
from .time_limits import Running, Watchdog

logger = logging.getLogger(__name__)

#: How long a group may run before it commits, unless the worker is told.
DEFAULT_BUDGET = 0.02
#: Tasks in a group at most, unless the worker is told. Each task that writes
#: is a subtransaction, and PostgreSQL keeps at most 64 of them per
#: transaction in shared memory: more make every other session's snapshots
#: slower while the group is open.
DEFAULT_MAX_SIZE = 50
#: How long a task name seen to outlast the budget runs alone before it is
#: tried in a group again (it may have been slow only for a moment).
SLOW_COOLDOWN = 30.0
#: A run is long when it outlasts the budget and this many usual ones...
SLOW_FACTOR = 4.0
#: ... and a task name is slow after this many long runs in a row.
SLOW_STRIKES = 3
#: The weight of each run in the moving average of what a task costs.
AVERAGE_WEIGHT = 0.1


@dataclass
class Pacer:
    """How many tasks to claim at once, from how long tasks have taken.

    A claim charges an attempt: claiming far more than a group can run
    within its budget would charge tasks that then wait, and would hand
    fewer to other workers. So the size follows a moving average of the time
    a task costs (every run counts, in a group or alone: were only groups
    measured, a size that fell to one would never grow back), and a task
    name seen to take longer than the budget, run after run, runs alone for
    :data:`SLOW_COOLDOWN` seconds (its group would have waited for it).
    """

    budget: float = DEFAULT_BUDGET
    max_size: int = DEFAULT_MAX_SIZE
    per_task: float = 0.0
    #: task name -> until when (monotonic) it runs alone
    slow: dict[str, float] = field(default_factory=dict)
    #: task name -> its long runs in a row
    strikes: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def size(self) -> int:
        """Tasks to claim for the next group."""
        if self.per_task <= 0:
            return min(8, self.max_size)
        return max(1, min(self.max_size, int(self.budget / self.per_task)))

    def note_runs(self, runs: Sequence[tuple[str, float]]) -> None:
        """Note how long the functions of one group (or of one task run
        alone) took: ``(name, seconds)`` each, in the order they ran.

        A run is long when it is past the budget *and* well past its
        neighbours in the same group (alone: past what tasks cost here on
        average). A task name is slow after :data:`SLOW_STRIKES` long runs in
        a row. Wall time is all a worker can measure, and on a busy machine
        any run may be long now and then: the thread lost the CPU, or
        waited for the GIL behind other threads. Those runs are long alone
        and together, not in a row, and sending every task of their name to
        run alone (a transaction each) would make the load far worse. A slow
        task's time stays out of the average, which sizes the groups.
        """
        with self.lock:
            for index, (name, seconds) in enumerate(runs):
                others = [t for i, (_, t) in enumerate(runs) if i != index]
                usual = statistics.median(others) if others else self.per_task
                if seconds > self.budget and seconds > SLOW_FACTOR * usual:
                    strikes = self.strikes[name] = self.strikes.get(name, 0) + 1
                    if strikes >= SLOW_STRIKES:
                        self.slow[name] = time.monotonic() + SLOW_COOLDOWN
                    continue
                self.strikes.pop(name, None)
                if name not in self.slow:
                    self.per_task = (
                        seconds
                        if self.per_task <= 0
                        else (1 - AVERAGE_WEIGHT) * self.per_task
                        + AVERAGE_WEIGHT * seconds
                    )

    def groupable(self, row: DelayedTask, registered: registry.Task[Any, Any]) -> bool:
        if not registered.atomic:
            return False
        until = self.slow.get(row.name)
        return until is None or time.monotonic() >= until


@dataclass(frozen=True)
class _Snapshot:
    """What running a task in a group may change on its row, as claimed."""

    status: str
    run_at: Any
    started_at: Any
    last_error: str
    last_traceback: str

    @classmethod
    def of(cls, row: DelayedTask) -> _Snapshot:
        return cls(
            row.status, row.run_at, row.started_at, row.last_error, row.last_traceback
        )

    def restore(self, row: DelayedTask) -> None:
        row.status, row.run_at, row.started_at = (
            self.status,
            self.run_at,
            self.started_at,
        )
        row.last_error, row.last_traceback = self.last_error, self.last_traceback


@dataclass
class GroupResult:
    #: rows whose attempt was recorded (success, retry or failure): ack them
    done: list[DelayedTask] = field(default_factory=list)
    #: rows another worker took over: leave their entries alone
    fenced: list[DelayedTask] = field(default_factory=list)
    #: claimed rows the budget did not reach: run them next
    left: list[DelayedTask] = field(default_factory=list)


def run_group(
    rows: Sequence[DelayedTask],
    tasks: Sequence[registry.Task[Any, Any]],
    db: str,
    pacer: Pacer,
    watchdog: Watchdog,
) -> GroupResult:
    """Run claimed ``rows`` (with their registered ``tasks``) as one group.

    Database errors propagate (nothing was committed, or everything was):
    the rows stay claimed, and their entries are handled again.
    """
    result = GroupResult()
    committed: list[bool] = []
    successes: list[transitions.Success] = []
    ran: list[tuple[DelayedTask, registry.Task[Any, Any]]] = []
    claimed: dict[Any, _Snapshot] = {}
    runs: list[tuple[str, float]] = []  # (name, seconds) of each function
    began = time.monotonic()
    savepoints = TaskSavepoints(connections[db])
    try:
        with (
            transaction.atomic(using=db),
            connections[db].execute_wrapper(savepoints),
        ):
            # Registered first, so it runs first at the commit (see
            # execution.run_alone).
            transaction.on_commit(lambda: committed.append(True), using=db)
            for index, (row, registered) in enumerate(zip(rows, tasks, strict=True)):
                if index and time.monotonic() - began >= pacer.budget:
                    result.left = list(rows[index:])
                    break
                # A task that was stuck past its limit returned after all:
                # what this thread held was handed back; keep none of it.
                watchdog.check_not_abandoned()
                ran.append((row, registered))
                claimed[row.pk] = _Snapshot.of(row)
                success = _run_one(row, registered, savepoints, runs, watchdog)
                if success is not None:
                    successes.append(success)
            try:
                if not transitions.succeed_many(successes, timezone.now(), db):
                    raise Fenced
            except DatabaseError as exc:
                # The group's own statement was the deadlock's victim.
                if savepoints.lost is exc:
                    raise TransactionLost(str(exc)) from exc
                raise
    except (Fenced, TransactionLost) as exc:
        # Some attempt of the group is another worker's now, and its
        # function's writes cannot be told from its neighbours', or the
        # database rolled the whole transaction back (a deadlock on MySQL
        # and MariaDB): nothing of the group was kept. Each task runs again
        # alone, fenced alone.
        if isinstance(exc, Fenced):
            logger.warning(
                "a group of %d tasks was fenced (this worker was paused past "
                "its visibility timeout?); running them one by one",
                len(ran),
            )
        else:
            logger.warning(
                "a group of %d tasks lost its transaction (%s); running them "
                "one by one",
                len(ran),
                exc.__cause__ or exc,
            )
        # Nothing of the group was kept: each row is as it was claimed.
        for row, _ in ran:
            claimed[row.pk].restore(row)
        return _one_by_one(ran, result, watchdog)
    except Exception:
        if not committed:
            raise
        logger.exception(
            "a group of %d tasks was committed, but an on_commit callback one of "
            "them registered raised; later callbacks of that transaction did "
            "not run",
            len(ran),
        )
    finally:
        pacer.note_runs(runs)
    for success in successes:
        report_success(success.row)
    result.done = list(rows[: len(ran)])
    return result


def _run_one(
    row: DelayedTask,
    registered: registry.Task[Any, Any],
    savepoints: TaskSavepoints,
    runs: list[tuple[str, float]],
    watchdog: Watchdog,
) -> transitions.Success | None:
    """Run one task of a group in a savepoint; its success, or None if it
    raised, expired or was refused (its outcome is then recorded in the
    group's transaction)."""
    now = timezone.now()
    if expired(row, now):
        if not expire(row, now):
            raise Fenced
        return None
    refused = refusal(row, registered)
    if refused is not None:
        if not refuse(row, refused):
            raise Fenced
        return None
    if watchdog.cancelled_before_start(row):
        # Cancelled while its neighbours ran: its row says so already.
        logger.info("task %s was cancelled before it started; not run", row.pk)
        return None
    limit = time_limit_of(registered)
    started = row.started_at = timezone.now()
    report_start(row)
    clock = time.monotonic()
    run: Running | None = None
    try:
        try:
            with savepoints.around_task():
                with watchdog.running(row, limit) as run:
                    note_start(row)
                    value = run_attempt(registered, row, limit, run.cancelled)
                    if run.cancelled.is_set():
                        # Cancelled while it ran: its writes go with its
                        # savepoint, and its success must not be recorded.
                        raise TaskCancelled(f"task {row.pk} was cancelled")
                value = stored_value(row, value)
        finally:
            runs.append((row.name, time.monotonic() - clock))
    except TransactionLost:
        raise  # not this task's failure: the whole group's
    except FAILURES as exc:
        # Only this task's savepoint was rolled back. Task code calling
        # sys.exit() fails its attempt like any error.
        error = failure_text(exc, limit)
        verdict = record_failure(
            row, exc, error=error, trace=traceback.format_exc(), task=registered
        )
        if verdict is Verdict.FENCED:
            if run is not None and run.cancelled.is_set():
                return None  # its row says cancelled: nothing to record
            raise Fenced from None
        return None
    return transitions.Success(row, started, value)


def _one_by_one(
    ran: list[tuple[DelayedTask, registry.Task[Any, Any]]],
    result: GroupResult,
    watchdog: Watchdog,
) -> GroupResult:
    for row, registered in ran:
        if run_alone(row, registered, watchdog):
            result.done.append(row)
        else:
            result.fenced.append(row)  # logged by run_alone
    return result
