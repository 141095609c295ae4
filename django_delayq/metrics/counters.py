"""The counters and histograms of one process, fed by the package's signals.

Created once per process by :func:`django_delayq.metrics.enable`, in the
default registry of prometheus-client (or, under ``delayq_worker
--processes N``, in its multi-process files: see :mod:`.server`).

Labels are bounded: ``queue`` is a configured queue, ``task`` a registered
task name (only registered names ever run), ``kind`` a field of the
sweeper's result.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.utils import timezone
from prometheus_client import Counter, Histogram

from .. import signals
from ..models import DelayedTask, OutboxEntry
from ..sweeper import COUNTS, Sweeper, SweepResult

#: Lateness (:func:`~django_delayq.timing.lateness`): from milliseconds, the
#: dispatcher's usual precision, to the minutes a sweep interval can add after a fault.
LATENESS_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)

#: Run time (start to committed outcome), milliseconds to minutes.
RUN_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)


_TASK = ("queue", "task")
_UID = "django_delayq.metrics"


class Counters:
    """Every metric this process counts; creating it starts counting."""

    def __init__(self) -> None:
        def tasks(event: str, text: str) -> Counter:
            return Counter(f"delayq_tasks_{event}", text, _TASK)

        self.scheduled = tasks("scheduled", "Tasks scheduled (committed).")
        self.started = tasks("started", "Task attempts started by a worker.")
        self.succeeded = tasks("succeeded", "Tasks that succeeded (committed).")
        self.retried = tasks("retried", "Failed attempts scheduled for a retry.")
        self.failed = tasks("failed", "Tasks failed for good, attempts used up.")
        self.cancelled = tasks("cancelled", "Tasks cancelled (committed).")
        self.dead_letters = Counter(
            "delayq_dead_letters",
            "Ready stream entries no worker can run, moved to the dead letters.",
            ("queue",),
        )
        self.outbox_writes = Counter(
            "delayq_outbox_writes",
            "Redis index writes that failed and went to the outbox.",
            ("queue",),
        )
        self.outbox_replays = Counter(
            "delayq_outbox_replays",
            "Outbox entries replayed into Redis.",
            ("queue",),
        )
        self.sweeps = Counter(
            "delayq_sweeps",
            "Sweep passes, by outcome (done, or skipped: another sweeper ran).",
            ("outcome",),
        )
        self.sweep_repairs = Counter(
            "delayq_sweep_repairs",
            "What sweep passes did, by kind (a field of the sweep result).",
            ("kind",),
        )
        self.lateness = Histogram(
            "delayq_task_lateness_seconds",
            "How long after it was due (its run_at, or when it was scheduled "
            "if later) a task attempt started.",
            _TASK,
            buckets=LATENESS_BUCKETS,
        )
        self.run_time = Histogram(
            "delayq_task_run_seconds",
            "From a task attempt's start to its committed outcome.",
            _TASK,
            buckets=RUN_BUCKETS,
        )
        # Every kind at 0 from the start: a rate over a series that appears
        # at its first repair would miss that repair.
        for kind in COUNTS:
            self.sweep_repairs.labels(kind)
        self._connect()

    def _connect(self) -> None:
        receivers = {
            signals.task_scheduled: self._scheduled,
            signals.task_cancelled: self._cancelled,
            signals.task_started: self._started,
            signals.task_succeeded: self._succeeded,
            signals.task_retried: self._retried,
            signals.task_failed: self._failed,
        }
        for signal, receiver in receivers.items():
            signal.connect(receiver, sender=DelayedTask, weak=False, dispatch_uid=_UID)
        signals.entry_dead_lettered.connect(
            self._dead_lettered, sender=DelayedTask, weak=False, dispatch_uid=_UID
        )
        signals.outbox_written.connect(
            self._outbox_written, sender=OutboxEntry, weak=False, dispatch_uid=_UID
        )
        signals.outbox_replayed.connect(
            self._outbox_replayed, sender=OutboxEntry, weak=False, dispatch_uid=_UID
        )
        signals.sweep_finished.connect(
            self._swept, sender=Sweeper, weak=False, dispatch_uid=_UID
        )

    # The receivers: ``task`` is the row, as the signals document.

    def _scheduled(self, task: DelayedTask, **kwargs: Any) -> None:
        self.scheduled.labels(task.queue, task.name).inc()

    def _cancelled(self, task: DelayedTask, **kwargs: Any) -> None:
        self.cancelled.labels(task.queue, task.name).inc()

    def _started(self, task: DelayedTask, **kwargs: Any) -> None:
        labels = (task.queue, task.name)
        self.started.labels(*labels).inc()
        if task.started_at is not None:
            self.lateness.labels(*labels).observe(task.start_lateness())

    def _succeeded(self, task: DelayedTask, **kwargs: Any) -> None:
        self.succeeded.labels(task.queue, task.name).inc()
        self._ran(task)

    def _retried(self, task: DelayedTask, **kwargs: Any) -> None:
        self.retried.labels(task.queue, task.name).inc()
        self._ran(task)

    def _failed(self, task: DelayedTask, **kwargs: Any) -> None:
        self.failed.labels(task.queue, task.name).inc()
        self._ran(task)

    def _ran(self, task: DelayedTask) -> None:
        # Sent after the outcome commits: now is when it took effect.
        started: datetime.datetime | None = task.started_at
        if started is not None:
            elapsed = (timezone.now() - started).total_seconds()
            self.run_time.labels(task.queue, task.name).observe(max(elapsed, 0.0))

    # The machinery's signals.

    def _dead_lettered(self, stream: str, **kwargs: Any) -> None:
        self.dead_letters.labels(queue_of(stream)).inc()

    def _outbox_written(self, queues: list[str], **kwargs: Any) -> None:
        for queue in queues:
            self.outbox_writes.labels(queue).inc()

    def _outbox_replayed(self, queues: list[str], **kwargs: Any) -> None:
        for queue in queues:
            self.outbox_replays.labels(queue).inc()

    def _swept(self, result: SweepResult, **kwargs: Any) -> None:
        self.sweeps.labels("skipped" if result.skipped else "done").inc()
        for kind in COUNTS:
            count = getattr(result, kind)
            if count:
                self.sweep_repairs.labels(kind).inc(count)


def queue_of(stream: str) -> str:
    """The queue of a shard key such as ``delayq:{orders:3}:ready``."""
    tag = stream.rpartition("}")[0].rpartition("{")[2]
    queue, _, shard = tag.rpartition(":")
    return queue if queue and shard.isdigit() else "unknown"
