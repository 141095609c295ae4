"""``delayq_tasks``: choosing tasks by filters, reading them in batches, and
cancelling, retrying or running them now.

The rows are read by primary key (time-ordered ids), a batch at a time, with
a cursor on the last id seen: a command over 100,000 tasks never holds them
all in memory, holds no lock while it works, and visits each row once even
while the rows it changed stop matching the filters (or, moved by
``run-now``, start matching them). A batch is cancelled in one short
transaction (:func:`~django_delayq.changes.cancel_ids`: one fenced
``UPDATE``, as :func:`~django_delayq.cancel` writes one row); a task is
retried or run now by the public API (:func:`~django_delayq.retry`,
:func:`~django_delayq.reschedule`), each in its own short transaction. Either
way Redis is kept in step exactly as for a single call.
"""

from __future__ import annotations

import datetime
import enum
import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import QuerySet
from django.db.models.functions import Left
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from .. import changes
from ..exceptions import DuplicateTask, InvalidSchedule, InvalidTaskState, TaskNotFound
from ..models import DelayedTask, Status, write_db

#: Ids read, and tasks changed, per batch (``--batch-size``).
BATCH_SIZE = 500
#: Tasks shown before a change is confirmed.
SAMPLE_SIZE = 10

#: The columns of ``list``, and the fields of its JSON lines.
LIST_FIELDS = (
    "id",
    "name",
    "queue",
    "status",
    "run_at",
    "attempts",
    "max_attempts",
    "key",
    "priority",
    "created_at",
    "finished_at",
)


# -- filters ------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    """Which tasks a command names; every given filter must hold."""

    names: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    key_prefix: str | None = None
    #: ``run_at`` from ``after`` (included) to ``before`` (excluded)
    after: datetime.datetime | None = None
    before: datetime.datetime | None = None
    #: ``finished_at`` likewise; a task not finished matches neither
    finished_after: datetime.datetime | None = None
    finished_before: datetime.datetime | None = None

    def queryset(self, db: str) -> QuerySet[DelayedTask]:
        rows = DelayedTask.objects.using(db).all()
        if self.names:
            rows = rows.filter(name__in=self.names)
        if self.queues:
            rows = rows.filter(queue__in=self.queues)
        if self.statuses:
            rows = rows.filter(status__in=self.statuses)
        if self.key_prefix is not None:
            # LIKE finds the candidates (SQLite's ignores the case of ASCII
            # letters); the equality of the key's head keeps the prefix
            # case-sensitive on every database, as keys are (the key column
            # compares byte for byte on MySQL and MariaDB too).
            rows = rows.annotate(_key_head=Left("key", len(self.key_prefix))).filter(
                key__startswith=self.key_prefix, _key_head=self.key_prefix
            )
        if self.after is not None:
            rows = rows.filter(run_at__gte=self.after)
        if self.before is not None:
            rows = rows.filter(run_at__lt=self.before)
        if self.finished_after is not None:
            rows = rows.filter(finished_at__gte=self.finished_after)
        if self.finished_before is not None:
            rows = rows.filter(finished_at__lt=self.finished_before)
        return rows


def parse_filters(options: dict[str, Any]) -> Filters:
    """The filters of the command's options; a bad value is a
    :class:`CommandError` naming the option and the fix."""
    statuses = tuple(options.get("statuses") or ())
    known = {str(s) for s in Status}
    unknown = [s for s in statuses if s not in known]
    if unknown:
        raise CommandError(
            f"--status {unknown[0]!r} is not a status; use one of "
            f"{', '.join(sorted(known))} (repeat --status for several)."
        )
    key_prefix = options.get("key")
    if key_prefix == "":
        raise CommandError(
            "--key '' matches every key: give the start of the keys, or leave "
            "--key out."
        )
    return Filters(
        names=tuple(options.get("names") or ()),
        queues=tuple(options.get("queues") or ()),
        statuses=statuses,
        key_prefix=key_prefix,
        after=parse_moment("--after", options.get("after")),
        before=parse_moment("--before", options.get("before")),
        finished_after=parse_moment("--finished-after", options.get("finished_after")),
        finished_before=parse_moment(
            "--finished-before", options.get("finished_before")
        ),
    )


def parse_moment(option: str, text: str | None) -> datetime.datetime | None:
    """An ISO 8601 date or date and time; without an offset, in
    ``TIME_ZONE`` (a date alone is its midnight there)."""
    if text is None:
        return None
    try:
        moment = parse_datetime(text)
        if moment is None:
            day = parse_date(text)
            if day is not None:
                moment = datetime.datetime.combine(day, datetime.time())
    except ValueError:
        moment = None
    if moment is None:
        raise CommandError(
            f"{option} {text!r} is not a date and time; use ISO 8601, e.g. "
            f"2026-03-01T03:00, 2026-03-01T03:00+01:00 or 2026-03-01 (without "
            f"an offset it is in TIME_ZONE, {settings.TIME_ZONE})."
        )
    if settings.USE_TZ and timezone.is_naive(moment):
        try:
            moment = timezone.make_aware(moment)
        except ValueError as exc:  # skipped or repeated by a DST change
            raise CommandError(
                f"{option} {text!r} does not name one moment in TIME_ZONE "
                f"({settings.TIME_ZONE}): {exc}. Give it with an offset, e.g. "
                f"{text}+01:00."
            ) from None
    elif not settings.USE_TZ and timezone.is_aware(moment):
        moment = timezone.make_naive(moment)
    return moment


# -- reading in batches ---------------------------------------------------------


def batches(
    rows: QuerySet[DelayedTask], size: int, limit: int | None = None
) -> Iterator[list[DelayedTask]]:
    """``rows`` in primary key order, ``size`` at a time (``limit`` at most).

    Each batch is a query of its own after the last id seen (no server-side
    cursor, which PgBouncer's transaction pooling breaks, and no OFFSET,
    which grows slower page by page)."""
    last: uuid.UUID | None = None
    left = limit
    while left is None or left > 0:
        page = rows.order_by("pk")
        if last is not None:
            page = page.filter(pk__gt=last)
        take = size if left is None else min(size, left)
        found = list(page[:take])
        if not found:
            return
        yield found
        if left is not None:
            left -= len(found)
        if len(found) < take:
            return
        last = found[-1].pk


def id_batches(rows: QuerySet[DelayedTask], size: int) -> Iterator[list[uuid.UUID]]:
    """The ids of ``rows`` in primary key order, ``size`` at a time."""
    last: uuid.UUID | None = None
    while True:
        page = rows.order_by("pk")
        if last is not None:
            page = page.filter(pk__gt=last)
        found = list(page.values_list("pk", flat=True)[:size])
        if not found:
            return
        yield found
        if len(found) < size:
            return
        last = found[-1]


# -- the rows as text -----------------------------------------------------------


def _value(task: DelayedTask, field: str) -> Any:
    value = getattr(task, field)
    if isinstance(value, datetime.datetime | uuid.UUID):
        return str(value) if isinstance(value, uuid.UUID) else value.isoformat()
    return value


def json_line(task: DelayedTask, fields: Sequence[str] = LIST_FIELDS) -> str:
    """One task as a JSON object on one line."""
    return json.dumps(
        {field: _value(task, field) for field in fields},
        cls=DjangoJSONEncoder,
        ensure_ascii=False,
    )


def all_fields(task: DelayedTask) -> dict[str, Any]:
    """Every column of ``task``, as JSON values."""
    return {
        field.attname: _value(task, field.attname)
        for field in DelayedTask._meta.concrete_fields
    }


TABLE_HEADER = (
    "id",
    "name",
    "queue",
    "status",
    "due",
    "attempts",
    "key",
)


def table_line(cells: Sequence[str]) -> str:
    """A row of ``list``'s table: fixed widths, so that it can be printed
    batch by batch; a longer value pushes the rest of its line along."""
    tid, name, queue, status, due, attempts, key = cells
    return (
        f"{tid:<36}  {name:<28}  {queue:<10}  {status:<9}  {due:<25}  "
        f"{attempts:>8}  {key}"
    ).rstrip()


def table_row(task: DelayedTask) -> str:
    return table_line(
        (
            str(task.pk),
            task.name,
            task.queue,
            task.status,
            task.run_at.isoformat(timespec="seconds"),
            f"{task.attempts}/{task.max_attempts}",
            task.key or "",
        )
    )


def show_text(task: DelayedTask) -> str:
    """One task in full, a field per line; the payloads as JSON, the
    traceback last."""
    fields = all_fields(task)
    width = max(len(name) for name in fields)
    traceback = fields.pop("last_traceback")
    lines = []
    for name, value in fields.items():
        if name in {"args", "kwargs", "meta", "result", "worker_ids"}:
            text = json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False)
        else:
            text = "" if value is None else str(value)
        lines.append(f"{name:<{width}}  {text}")
    lines.append(f"{'last_traceback':<{width}}")
    lines.extend(f"    {line}" for line in traceback.splitlines())
    return "\n".join(lines)


# -- the changes ------------------------------------------------------------------


class Outcome(enum.Enum):
    DONE = "done"
    #: no longer in a state the change applies to (changed meanwhile)
    SKIPPED = "skipped"
    #: in that state, but the change was refused (a held key, an expiry)
    FAILED = "failed"


@dataclass(frozen=True)
class Change:
    """What ``cancel``, ``retry`` and ``run-now`` each are."""

    name: str
    #: the statuses of the tasks it applies to
    applies_to: tuple[str, ...]
    done: str  # the past tense, for the summary
    apply: Callable[[uuid.UUID], tuple[Outcome, str]]
    #: the change of a whole batch at once, where there is one: each id's
    #: outcome
    apply_batch: (
        Callable[[list[uuid.UUID]], dict[uuid.UUID, tuple[Outcome, str]]] | None
    ) = None


def _cancel(task_id: uuid.UUID) -> tuple[Outcome, str]:
    if changes.cancel(task_id, using=write_db()):
        return Outcome.DONE, ""
    status = (
        DelayedTask.objects.using(write_db())
        .filter(pk=task_id)
        .values_list("status", flat=True)
        .first()
    )
    if status == Status.RUNNING:
        # cancel() stops a running task; one still running after it said
        # no was not cancelled, which the operator asked for.
        return Outcome.FAILED, "not cancelled: running"
    return Outcome.SKIPPED, f"not cancelled: {status or 'deleted'}"


def _cancel_batch(ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[Outcome, str]]:
    db = write_db()
    cancelled = changes.cancel_ids(ids, using=db)
    outcomes = {task_id: (Outcome.DONE, "") for task_id in cancelled}
    rest = [task_id for task_id in ids if task_id not in cancelled]
    if rest:
        statuses = dict(
            DelayedTask.objects.using(db)
            .filter(pk__in=rest)
            .values_list("pk", "status")
        )
        for task_id in rest:
            status = statuses.get(task_id)
            if status == Status.RUNNING:  # as in _cancel
                outcomes[task_id] = (Outcome.FAILED, "not cancelled: running")
            else:
                outcomes[task_id] = (
                    Outcome.SKIPPED,
                    f"not cancelled: {status or 'deleted'}",
                )
    return outcomes


def _retry(task_id: uuid.UUID) -> tuple[Outcome, str]:
    try:
        changes.retry(task_id, using=write_db())
    except (TaskNotFound, InvalidTaskState) as exc:
        return Outcome.SKIPPED, str(exc)
    except (DuplicateTask, InvalidSchedule) as exc:  # a held key; expired
        return Outcome.FAILED, str(exc)
    return Outcome.DONE, ""


def _run_now(task_id: uuid.UUID) -> tuple[Outcome, str]:
    try:
        changes.reschedule(task_id, delay=0, using=write_db())
    except (TaskNotFound, InvalidTaskState) as exc:
        return Outcome.SKIPPED, str(exc)
    except InvalidSchedule as exc:  # it has expired
        return Outcome.FAILED, str(exc)
    return Outcome.DONE, ""


CHANGES = {
    "cancel": Change(
        "cancel",
        (Status.SCHEDULED, Status.RUNNING),
        "cancelled",
        _cancel,
        apply_batch=_cancel_batch,
    ),
    "retry": Change("retry", (Status.FAILED,), "retried", _retry),
    "run-now": Change("run-now", (Status.SCHEDULED,), "due now", _run_now),
}


def targets(change: Change, filters: Filters) -> Filters:
    """``filters`` narrowed to the statuses ``change`` applies to."""
    if not filters.statuses:
        return _with_statuses(filters, change.applies_to)
    kept = tuple(s for s in filters.statuses if s in change.applies_to)
    if not kept:
        raise CommandError(
            f"{change.name} applies to {' and '.join(change.applies_to)} tasks; "
            f"--status {' --status '.join(filters.statuses)} selects none it "
            f"could change. Leave --status out, or name one of those."
        )
    return _with_statuses(filters, kept)


def _with_statuses(filters: Filters, statuses: tuple[str, ...]) -> Filters:
    return Filters(
        names=filters.names,
        queues=filters.queues,
        statuses=tuple(str(s) for s in statuses),
        key_prefix=filters.key_prefix,
        after=filters.after,
        before=filters.before,
        finished_after=filters.finished_after,
        finished_before=filters.finished_before,
    )


@dataclass
class Tally:
    done: int = 0
    skipped: int = 0
    failed: int = 0

    @property
    def seen(self) -> int:
        return self.done + self.skipped + self.failed

    def add(self, outcome: Outcome) -> None:
        setattr(self, outcome.value, getattr(self, outcome.value) + 1)


def apply_change(
    change: Change,
    rows: QuerySet[DelayedTask],
    size: int,
    report: Callable[[uuid.UUID, Outcome, str], None],
    progress: Callable[[Tally], None],
) -> Tally:
    """Apply ``change`` to each of ``rows``, reading the ids ``size`` at a
    time: a batch in one transaction where the change has a batch form
    (cancel), else one task per transaction; ``report`` hears of each task
    not done, ``progress`` of each batch's end."""
    tally = Tally()
    for ids in id_batches(rows, size):
        if change.apply_batch is not None:
            outcomes = change.apply_batch(ids)
        else:
            outcomes = {task_id: change.apply(task_id) for task_id in ids}
        for task_id in ids:
            outcome, reason = outcomes[task_id]
            tally.add(outcome)
            if outcome is not Outcome.DONE:
                report(task_id, outcome, reason)
        progress(tally)
    return tally
