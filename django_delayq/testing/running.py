"""Running due tasks in the test's own process, the way a worker does.

Each task goes through the worker's one-row path
(:func:`django_delayq.worker.execution.execute`): the row is claimed
(``scheduled -> running``, fenced on the attempt), the function runs in a
transaction with its success record (or alone, for ``atomic=False``), and the
outcome is recorded by :mod:`django_delayq.outcomes`: a retry with backoff, a
failure after ``max_attempts``, the signals and the log lines. Nothing is
read from or written to Redis: the rows say what is due.

A task due in the future runs as of its due time: while it runs,
``django.utils.timezone.now()`` reads that time (the clock the worker's
fences, ``schedule()`` and most task code read), so the worker's "never
early" rule holds, a task that compares times sees the moment it would have
run, and what it schedules is due counting from then. The shift sits on top
of whatever clock the test has (time-machine, freezegun) and is undone when
the task returns.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models import Case, IntegerField, QuerySet, Value, When
from django.test import TestCase
from django.utils import timezone

from .. import registry
from ..conf import get_settings
from ..db.testcase_blocks import inside_testcase
from ..exceptions import TaskNotRegistered, TooManyRuns
from ..ids import process_name
from ..models import DelayedTask, Status, write_db
from ..timing import ceil_ms
from ..worker import claim_and_run
from ..worker.time_limits import Watchdog

logger = logging.getLogger(__name__)

#: Attempts run_due() runs at most before it decides tasks keep scheduling
#: each other.
DEFAULT_MAX_RUNS = 1000
#: How often time limits are enforced while a task with one runs.
WATCH_INTERVAL = 0.02
#: How long an interrupted task may take to unwind before it is reported stuck.
GRACE = 2.0

#: What the claim of an attempt the toolkit runs records where a worker
#: records the stream entry that delivered it: no stream delivered it.
TOOLKIT_CLAIM = "testing"


@dataclass(frozen=True)
class Ran:
    """One attempt run by :func:`run_due` (or by the immediate mode)."""

    #: the row as the attempt left it
    task: DelayedTask
    #: which attempt of the task it was (1 for the first)
    attempt: int
    #: ``"succeeded"``, ``"retrying"`` (another attempt is scheduled),
    #: ``"failed"`` (for good) or ``"cancelled"`` (it had expired, and its
    #: function was not called)
    outcome: str
    #: the attempt's error (``"ValueError: ..."``), or why it was cancelled
    #: (``"expired at ..."``); empty if it succeeded
    error: str
    #: when it started, by the clock the task saw
    started_at: datetime.datetime

    @property
    def name(self) -> str:
        """The task's registered name."""
        return self.task.name

    @property
    def result(self) -> Any:
        """What the function returned (as stored), if it succeeded."""
        return self.task.result


def run_due(
    until: datetime.datetime | None = None,
    *,
    queue: str | None = None,
    max_runs: int = DEFAULT_MAX_RUNS,
) -> list[Ran]:
    """Run every task due by ``until`` (default: now), in due order, in this
    process, through the worker's execution path; return what ran.

    Tasks that the tasks schedule, and retries after a failure (with their
    backoff), run too if they are due by ``until``. Among tasks due at a
    moment, a higher priority band runs first, as a worker takes them.

    :param until: an aware ``datetime`` (with ``USE_TZ``). A task due after
        now runs as of its due time (see the module's documentation).
    :param queue: only the tasks of this queue.
    :param max_runs: attempts to run at most; past them
        :class:`~django_delayq.exceptions.TooManyRuns` is raised.
    :returns: one :class:`Ran` per attempt, in the order they ran.
    """
    if until is None:
        # Due times are stored to the millisecond, rounded up: a task
        # scheduled "now" a moment ago is due by now, rounded up too.
        until = ceil_ms(timezone.now())
    if not isinstance(until, datetime.datetime):
        raise TypeError(
            f"run_due(until=...) takes a datetime, not {type(until).__name__}: "
            f"e.g. until=timezone.now() + timedelta(minutes=16)."
        )
    if timezone.is_naive(until) and timezone.is_aware(timezone.now()):
        raise ValueError(
            "run_due(until=...) needs an aware datetime with USE_TZ: use "
            "django.utils.timezone.now() + timedelta(...)."
        )
    if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 1:
        raise ValueError(f"run_due(max_runs=...) must be 1 or more; got {max_runs!r}.")
    rows = DelayedTask.objects.using(write_db()).filter(
        status=Status.SCHEDULED, run_at__lte=until
    )
    if queue is not None:
        rows = rows.filter(queue=queue)
    ran: list[Ran] = []
    present = timezone.now()
    with _Runner() as runner:
        while True:
            row = _first(rows.filter(run_at__lte=present), by_band=True)
            if row is None:
                row = _first(rows, by_band=False)
                if row is None:
                    return ran
                # Nothing is due yet: move on to the next due time.
                present = max(present, row.run_at)
                continue
            if len(ran) >= max_runs:
                raise TooManyRuns(
                    f"run_due() ran {max_runs} attempts and {row.name} (task "
                    f"{row.pk}, due {row.run_at.isoformat()}) is still due by "
                    f"{until.isoformat()}: does a task schedule itself, or "
                    f"another, every time it runs? Pass an earlier until= or "
                    f"a larger max_runs=."
                )
            ran.append(runner.run(row, present))


def run_first_attempts(task_ids: Iterable[uuid.UUID]) -> list[Ran]:
    """Run the tasks that are still scheduled and have not run yet, each as
    of its due time (the immediate mode, at a commit)."""
    ran = []
    with _Runner() as runner:
        for task_id in task_ids:
            row = DelayedTask.objects.using(write_db()).filter(pk=task_id).first()
            # A retry waits for its backoff, as in production: run_due()
            # runs it. A cancelled or already finished task does not run.
            if row is None or row.status != Status.SCHEDULED or row.attempts:
                continue
            ran.append(runner.run(row, max(timezone.now(), row.run_at)))
    return ran


def _first(rows: QuerySet[DelayedTask], *, by_band: bool) -> DelayedTask | None:
    if not by_band:
        return rows.order_by("run_at", "id").first()
    band = Case(
        When(priority__gt=0, then=Value(1)),
        When(priority__lt=0, then=Value(-1)),
        default=Value(0),
        output_field=IntegerField(),
    )
    return rows.alias(band=band).order_by("-band", "run_at", "id").first()


class _Runner:
    """Runs rows one at a time through the worker's execution path, with a
    watchdog enforcing time limits when a task has one."""

    def __init__(self) -> None:
        self.worker = f"{process_name()}-test"
        self.watchdog = Watchdog(GRACE)
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> _Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()

    def run(self, row: DelayedTask, present: datetime.datetime) -> Ran:
        if self._watcher is None and self._has_limit(row):
            self._watcher = threading.Thread(
                target=self._watch, name="delayq-test-time-limits", daemon=True
            )
            self._watcher.start()
        with clock_at_least(present), _attempt_commits(write_db()):
            started = timezone.now()
            claim_and_run(
                row,
                claim_entry=TOOLKIT_CLAIM,
                worker=self.worker,
                using=write_db(),
                watchdog=self.watchdog,
            )
        row.refresh_from_db()
        outcome = {
            Status.SUCCEEDED: "succeeded",
            Status.SCHEDULED: "retrying",
            Status.FAILED: "failed",
            Status.CANCELLED: "cancelled",
        }.get(Status(row.status), str(row.status))
        error = "" if outcome == "succeeded" else row.last_error
        return Ran(row, row.attempts, outcome, error, row.started_at or started)

    def _has_limit(self, row: DelayedTask) -> bool:
        if get_settings().time_limit is not None:
            return True
        try:
            return registry.get(row.name).time_limit is not None
        except TaskNotRegistered:
            return False  # an unknown name runs no code

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL):
            for stuck in self.watchdog.check():
                logger.warning(
                    "task %s ran past its time limit of %g s and could not be "
                    "interrupted (a call in C code?); run_due() waits for it",
                    stuck.row.pk,
                    stuck.limit,
                )


@contextlib.contextmanager
def _attempt_commits(using: str) -> Iterator[None]:
    """Inside Django's ``TestCase``, run the ``on_commit`` callbacks an
    attempt registers when it ends, as its commit in a worker would.

    They are how the outcome is reported (``task_retried``, ``task_failed``,
    their log lines) and what the task's own code defers to the commit.
    Elsewhere the attempt commits for real and Django runs them. Django's
    own ``TestCase.captureOnCommitCallbacks(execute=True)`` runs them, those
    they register in turn included.
    """
    if not inside_testcase(connections[using]):
        yield
        return
    with TestCase.captureOnCommitCallbacks(using=using, execute=True):
        yield


@contextlib.contextmanager
def clock_at_least(moment: datetime.datetime) -> Iterator[None]:
    """Make ``django.utils.timezone.now()`` read no earlier than ``moment``
    inside the block, moving with the clock underneath."""
    original = timezone.now
    shift = moment - original()
    if shift <= datetime.timedelta(0):
        yield
        return

    def now() -> datetime.datetime:
        return original() + shift

    # Module attribute, read at each call: the package and task code call
    # timezone.now(), as Django's auto_now fields do.
    setattr(timezone, "now", now)  # noqa: B010
    try:
        yield
    finally:
        setattr(timezone, "now", original)  # noqa: B010
