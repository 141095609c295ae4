"""The task rows (the source of truth) and the outbox of pending Redis writes."""

from __future__ import annotations

import datetime
from typing import Any, ClassVar

from django.core.checks import CheckMessage
from django.db import models, router
from django.db.models import Q, Value
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .ids import uuid7
from .store.keys import LIMITS_SHARD
from .timing import lateness


class Status(models.TextChoices):
    SCHEDULED = "scheduled", _("scheduled")
    RUNNING = "running", _("running")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    CANCELLED = "cancelled", _("cancelled")


#: Statuses in which a task still holds its dedupe key and may run.
ACTIVE_STATUSES = (Status.SCHEDULED, Status.RUNNING)
TERMINAL_STATUSES = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

#: Django's warnings for databases without conditional indexes (MySQL,
#: MariaDB), about the model's conditional constraint and index: what they
#: would guard is taken care of there (see DelayedTask.check).
_HANDLED_ON_MYSQL = frozenset({"models.W036", "models.W037"})


def _entry_time(claim_entry: str) -> datetime.datetime | None:
    """When the stream entry a claim names was added (its id is
    ``<epoch ms>-<sequence>``, maybe with a batch mark after); None if
    the claim names no stream entry (the testing toolkit's)."""
    ms, _, rest = claim_entry.partition("-")
    if not ms.isdigit() or not rest:
        return None
    return datetime.datetime.fromtimestamp(int(ms) / 1000, datetime.UTC)


def due_by(moment: datetime.datetime) -> Q:
    """The condition of a task due by ``moment``: scheduled, ``run_at`` not
    after it. The claim's hand-written SQL (db/statements.py) tests the same
    condition; both are served by the ``(status, run_at)`` index."""
    return Q(status=Status.SCHEDULED, run_at__lte=moment)


def overdue_by(
    moment: datetime.datetime, grace: datetime.timedelta = datetime.timedelta(0)
) -> Q:
    """The condition of a task late at ``moment``: scheduled, and more than
    ``grace`` past its ``run_at`` (dispatch and claim take a moment, so the
    reports allow one before they call a task late). A task under limits
    that is due waits for them: not late (:func:`waiting_for_limits_by`)."""
    return Q(status=Status.SCHEDULED, run_at__lt=moment - grace) & ~Q(
        shard=LIMITS_SHARD
    )


def waiting_for_limits_by(moment: datetime.datetime) -> Q:
    """The condition of a task due by ``moment`` that waits for a
    concurrency or rate limit to admit it (its row is in a limits shard):
    reported apart from the late ones (see django_delayq.limits)."""
    return Q(status=Status.SCHEDULED, run_at__lte=moment, shard=LIMITS_SHARD)


class DelayedTaskQuerySet(models.QuerySet["DelayedTask"]):
    def active(self) -> DelayedTaskQuerySet:
        return self.filter(status__in=ACTIVE_STATUSES)

    def scheduled(self) -> DelayedTaskQuerySet:
        return self.filter(status=Status.SCHEDULED)

    def terminal(self) -> DelayedTaskQuerySet:
        return self.filter(status__in=TERMINAL_STATUSES)

    def due(self, *, by: datetime.datetime) -> DelayedTaskQuerySet:
        """The tasks due by ``by`` (:func:`due_by`)."""
        return self.filter(due_by(by))

    def overdue(
        self,
        *,
        by: datetime.datetime,
        grace: datetime.timedelta = datetime.timedelta(0),
    ) -> DelayedTaskQuerySet:
        """The tasks more than ``grace`` late at ``by`` (:func:`overdue_by`)."""
        return self.filter(overdue_by(by, grace))

    def waiting_for_limits(self, *, by: datetime.datetime) -> DelayedTaskQuerySet:
        """The tasks due by ``by`` that wait for their limits
        (:func:`waiting_for_limits_by`)."""
        return self.filter(waiting_for_limits_by(by))


class DelayedTask(models.Model):
    """One scheduled call of a registered task.

    The row is the truth: Redis only indexes its id by ``run_at``. A row is
    written in the caller's transaction, so a rolled-back ``schedule()`` leaves
    nothing behind, and its id reaches Redis only after the commit.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    name = models.CharField(_("task name"), max_length=200)
    queue = models.CharField(_("queue"), max_length=64, default="default")
    shard = models.PositiveSmallIntegerField(
        _("shard"),
        default=0,
        help_text=_("The Redis shard of the queue whose due-set indexes this task."),
    )
    args = models.JSONField(_("positional arguments"), default=list, blank=True)
    kwargs = models.JSONField(_("keyword arguments"), default=dict, blank=True)
    # NULL, not "", for "no key": the partial unique index ignores NULLs, so
    # any number of keyless tasks can be active at once.
    key = models.CharField(  # noqa: DJ001
        _("dedupe key"),
        max_length=200,
        null=True,
        blank=True,
        help_text=_("At most one scheduled or running task holds a given key."),
    )
    run_at = models.DateTimeField(_("run at"))
    # Nullable, with no default: a row an earlier version inserts during a
    # deploy (an INSERT that does not name the column) never expires.
    expires_at = models.DateTimeField(
        _("expires at"),
        null=True,
        blank=True,
        help_text=_(
            "A task not started by this moment never runs: the worker that "
            "claims it later cancels it. Empty: it never expires."
        ),
    )
    status = models.CharField(
        _("status"), max_length=16, choices=Status.choices, default=Status.SCHEDULED
    )
    attempts = models.PositiveIntegerField(
        _("attempts"), default=0, help_text=_("Runs started so far.")
    )
    max_attempts = models.PositiveIntegerField(_("max attempts"), default=3)
    # db_default as well as default: a row inserted by an earlier version,
    # which does not know the column, still gets a value during a deploy.
    priority = models.SmallIntegerField(
        _("priority"),
        default=0,
        db_default=0,
        help_text=_(
            "From -100 to 100: among due tasks, a higher band (above 0, 0, "
            "below 0) starts first."
        ),
    )
    claim_entry = models.CharField(
        _("claiming stream entry"),
        max_length=64,
        blank=True,
        default="",
        db_default="",
        help_text=_(
            "The ready-stream entry whose delivery started the current attempt; "
            "only that entry may take the attempt over from a dead worker."
        ),
    )
    worker_ids = models.JSONField(
        _("workers"),
        default=list,
        db_default=Value([], output_field=models.JSONField()),
        blank=True,
        help_text=_(
            "The worker thread (host:pid:id-thread) that claimed each attempt, "
            "oldest first."
        ),
    )
    # NULL for "no metadata", which is what a row written by an earlier
    # version (which does not know the column) holds during a deploy too;
    # the run context and the admin show it as {}.
    meta = models.JSONField(
        _("metadata"),
        null=True,
        blank=True,
        help_text=_(
            "What the caller and the middleware attached to the task (a tenant, "
            "a request id), for the middleware of its runs; not arguments."
        ),
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    result = models.JSONField(_("return value"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True, default="")
    last_traceback = models.TextField(_("last traceback"), blank=True, default="")

    objects: ClassVar[DelayedTaskQuerySet] = DelayedTaskQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        verbose_name = _("delayed task")
        verbose_name_plural = _("delayed tasks")
        ordering = ("-run_at",)
        # The admin's actions, each granted on its own (see docs/guide/admin.md).
        permissions = [
            ("cancel_delayedtask", _("Can cancel scheduled tasks")),
            ("run_delayedtask", _("Can run scheduled tasks now")),
            ("retry_delayedtask", _("Can retry failed tasks")),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["key"],
                condition=Q(status__in=["scheduled", "running"]),
                name="delayq_unique_active_key",
                violation_error_message=_(
                    "An active task with this dedupe key already exists."
                ),
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="delayq_max_attempts_gte_1"
            ),
        ]
        indexes = [
            # Dispatcher/sweeper windows (status=scheduled AND run_at < t) and
            # the admin's status filter ordered by run_at.
            models.Index(fields=["status", "run_at"], name="delayq_status_run_at"),
            # Pruning of finished rows older than their retention.
            models.Index(
                fields=["status", "finished_at"], name="delayq_status_finished"
            ),
            models.Index(fields=["name", "status"], name="delayq_name_status"),
            # cancel(key=), reschedule(key=) and the dedupe checks. The unique
            # index above covers them on PostgreSQL, but SQLite only uses a
            # partial index whose condition its planner can prove from the
            # query, and it cannot prove "status IN (...)" from bound
            # parameters; "key = ?" does imply "key IS NOT NULL". With the
            # status as its second column, SQLite (which has no statistics
            # unless ANALYZE ran) prefers it to the status indexes above.
            # Keyless rows stay out of it, so they pay nothing.
            models.Index(
                fields=["key", "status"],
                condition=Q(key__isnull=False),
                name="delayq_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} [{self.status}] {self.id}"

    def start_lateness(self) -> float:
        """Seconds its current attempt started after it could
        (:func:`~django_delayq.timing.lateness`): after its ``run_at``, or,
        under concurrency or rate limits, after its limits admitted it: the
        wait for them is not lateness. The admission is the moment its
        delivery was added to the stream, which the claim keeps."""
        assert self.started_at is not None
        due = self.run_at
        if self.shard == LIMITS_SHARD:
            admitted = _entry_time(self.claim_entry)
            if admitted is not None:
                due = max(due, admitted)
        return lateness(due, self.created_at, self.started_at)

    @classmethod
    def check(cls, **kwargs: Any) -> list[CheckMessage]:
        # On MySQL and MariaDB, Django warns that the conditional unique
        # constraint is not created and the key index's condition ignored.
        # Both are taken care of there: migration 0009 makes the key unique
        # among active tasks with a generated column, and the key index
        # without its condition serves the key lookups as well.
        return [
            message
            for message in super().check(**kwargs)
            if message.id not in _HANDLED_ON_MYSQL
        ]

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class OutboxEntry(models.Model):
    """A task whose Redis index entry could not be written after commit.

    The entry records *which* task is out of sync, not *what* to write: the
    replay re-reads the task row and makes Redis agree with it (add a
    scheduled task, remove a terminal or deleted one). Replaying twice, or
    replaying an old entry after newer changes, is therefore harmless.
    """

    class Action(models.TextChoices):
        SCHEDULE = "schedule", _("schedule")
        CANCEL = "cancel", _("cancel")
        RESCHEDULE = "reschedule", _("reschedule")

    id = models.BigAutoField(primary_key=True)
    task_id = models.UUIDField(_("task id"), db_index=True)
    # Where the task is indexed, so a replay can still remove the member of a
    # task whose row has been deleted since.
    queue = models.CharField(_("queue"), max_length=64)
    shard = models.PositiveSmallIntegerField(_("shard"), default=0)
    action = models.CharField(_("action"), max_length=16, choices=Action.choices)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    attempts = models.PositiveIntegerField(_("replay attempts"), default=0)
    next_attempt_at = models.DateTimeField(_("next attempt at"), default=timezone.now)
    last_error = models.TextField(_("last error"), blank=True, default="")

    class Meta:
        verbose_name = _("outbox entry")
        verbose_name_plural = _("outbox entries")
        ordering = ("id",)
        permissions = [("replay_outboxentry", _("Can replay outbox entries"))]
        indexes = [
            models.Index(fields=["next_attempt_at"], name="delayq_outbox_next"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.task_id}"


class PeriodicSchedule(models.Model):
    """The shared state of one periodic schedule (``@periodic`` or
    ``DELAYQ["PERIODIC"]``).

    Its ticks are ordinary task rows; this row records how far ahead they are
    written. Every process that keeps schedules advances
    ``planned_through`` with a compare-and-set in the transaction that
    inserts the ticks after it, so a tick is written once however many
    processes plan at the same moment.
    """

    name = models.CharField(_("name"), max_length=200, primary_key=True)
    definition = models.CharField(
        _("definition"),
        max_length=300,
        help_text=_(
            "When it ticks, as its ticks were last planned; a deploy that "
            "changes it replaces the ticks not yet due."
        ),
    )
    planned_through = models.DateTimeField(
        _("planned through"),
        help_text=_("The latest tick written as a task row."),
    )
    paused = models.BooleanField(
        _("paused"),
        default=False,
        db_default=False,
        help_text=_("A paused schedule writes no ticks; those missed are skipped."),
    )
    paused_at = models.DateTimeField(_("paused at"), null=True, blank=True)
    removed_at = models.DateTimeField(
        _("removed at"),
        null=True,
        blank=True,
        help_text=_("When the code stopped declaring it; its future ticks stop."),
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        verbose_name = _("periodic schedule")
        verbose_name_plural = _("periodic schedules")
        ordering = ("name",)
        permissions = [
            ("pause_periodicschedule", _("Can pause and resume periodic schedules")),
        ]

    def __str__(self) -> str:
        return self.name


class RuntimeSchedule(models.Model):
    """A periodic schedule defined in the database (in the admin), beside
    those the code declares.

    Only its definition: the planner reads the enabled ones every round
    and keeps them exactly as it keeps ``@periodic`` schedules, through
    the :class:`PeriodicSchedule` row of the same name (created by the
    planner). Its fields are checked by
    :func:`django_delayq.recurring.runtime.validate`; a row that fails the
    checks (written around them, or whose task a deploy removed) writes no
    ticks, and the planner logs why.
    """

    name = models.CharField(
        _("name"),
        max_length=160,
        unique=True,
        help_text=_(
            "Names its ticks' keys (periodic:NAME@TIME); no schedule "
            "declared in the code may have it."
        ),
    )
    task = models.CharField(
        _("task"), max_length=200, help_text=_("A registered task's name.")
    )
    args = models.JSONField(
        _("args"), default=list, blank=True, help_text=_("A JSON list.")
    )
    kwargs = models.JSONField(
        _("kwargs"), default=dict, blank=True, help_text=_("A JSON object.")
    )
    cron = models.CharField(
        _("cron"),
        max_length=100,
        blank=True,
        default="",
        help_text=_(
            "5 fields (minute hour day month weekday), or 6 with seconds "
            "first; or leave empty and set every."
        ),
    )
    every = models.PositiveIntegerField(
        _("every (seconds)"),
        null=True,
        blank=True,
        help_text=_("Ticks at whole multiples of this many seconds since 1970."),
    )
    time_zone = models.CharField(
        _("time zone"),
        max_length=64,
        blank=True,
        default="",
        help_text=_("An IANA name, for cron; empty: settings.TIME_ZONE."),
    )
    queue = models.CharField(
        _("queue"),
        max_length=64,
        blank=True,
        default="",
        help_text=_("Empty: the task's queue."),
    )
    priority = models.IntegerField(
        _("priority"), null=True, blank=True, help_text=_("Empty: the task's.")
    )
    catch_up = models.CharField(
        _("catch up"),
        max_length=10,
        default="latest",
        help_text=_(
            "Which ticks missed while nothing kept the schedule run: none, "
            "the latest, or all (up to 100)."
        ),
    )
    enabled = models.BooleanField(
        _("enabled"),
        default=True,
        help_text=_(
            "A disabled schedule writes no ticks; those not yet due are "
            "cancelled, and those that fall while it is disabled are skipped."
        ),
    )
    expires_at = models.DateTimeField(
        _("expires at"),
        null=True,
        blank=True,
        help_text=_("No tick after this moment."),
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("runtime periodic schedule")
        verbose_name_plural = _("runtime periodic schedules")
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class PausedQueue(models.Model):
    """A queue paused by an operator: no worker claims its tasks until the
    row is deleted (``delayq_queue resume``).

    The row is the truth; ``<prefix>:paused`` in Redis mirrors it for the
    workers' cheap check (see :mod:`django_delayq.queues`). The queue's
    tasks stay scheduled and fall due as usual: paused, they wait in its
    ready streams.
    """

    name = models.CharField(_("queue"), max_length=64, unique=True)
    paused_at = models.DateTimeField(_("paused at"), default=timezone.now)
    paused_by = models.CharField(_("paused by"), max_length=150, blank=True)
    reason = models.CharField(_("reason"), max_length=200, blank=True)

    class Meta:
        verbose_name = _("paused queue")
        verbose_name_plural = _("paused queues")
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


def write_db() -> str:
    """The database of every django-delayq row and transaction: the one the
    router names for writing :class:`DelayedTask`, never a replica, which
    may lag. Outbox entries and periodic schedules live there too (their
    rows commit with the tasks'): ``delayq.E018`` refuses a router that
    sends them elsewhere. The one place that decides it."""
    return router.db_for_write(DelayedTask)


def read_db() -> str:
    """Where the reports (``delayq_status``, the health check, the backlog
    gauges) read counts: the router's database for reading
    :class:`DelayedTask`, a replica if it names one."""
    return router.db_for_read(DelayedTask)
