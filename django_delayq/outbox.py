"""Keeping the Redis index in step with task rows: on commit, or via the outbox.

The Redis write happens in ``transaction.on_commit``. If it fails, the task id
goes to the outbox table instead and :func:`replay_outbox` catches Redis up
later. Neither path ever raises into the code that committed the task.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from django.db import DatabaseError, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from . import signals
from .conf import Settings, get_settings
from .conf.schema import indexer_path
from .exceptions import InvalidConfiguration, KeyPrefixInUse
from .models import DelayedTask, OutboxEntry, Status, write_db
from .ownership import check_prefix_for_writes
from .store import index
from .store.connection import (
    breaker_reason,
    breaker_scope,
    get_client,
    note_failure,
)
from .store.errors import error_text
from .timing import to_score

logger = logging.getLogger(__name__)

#: Replay backoff: 1 s, 2 s, 4 s ... capped at 5 minutes.
_REPLAY_BACKOFF_CAP = 300.0


def entry_of(task: DelayedTask) -> index.IndexEntry:
    return index.IndexEntry(
        task.pk, task.queue, task.shard, to_score(task.run_at), task.priority
    )


class Indexer(Protocol):
    """What happens to the Redis index after a transaction that changed
    task rows commits."""

    def index(self, tasks: Sequence[DelayedTask], action: str, using: str) -> None:
        """The tasks are scheduled (again), at their ``run_at``."""

    def unindex(self, tasks: Sequence[DelayedTask], action: str, using: str) -> None:
        """The tasks will not run: cancelled, or finished."""


class RedisIndexer:
    """Production: write Redis on commit, or the outbox when that fails."""

    def index(self, tasks: Sequence[DelayedTask], action: str, using: str) -> None:
        entries = [entry_of(task) for task in tasks]
        transaction.on_commit(
            lambda: _write(entries, action, using, add=True), using=using
        )

    def unindex(self, tasks: Sequence[DelayedTask], action: str, using: str) -> None:
        entries = [
            index.IndexEntry(task.pk, task.queue, task.shard, 0) for task in tasks
        ]
        transaction.on_commit(
            lambda: _write(entries, action, using, add=False), using=using
        )


_REDIS = RedisIndexer()
#: The indexer chosen for the current settings object
_chosen: tuple[Settings, Indexer] | None = None


def indexer() -> Indexer:
    """The indexer the settings call for, chosen once per settings object.

    The one seam of the testing toolkit (``DELAYQ["TEST_MODE"]``): every
    change of a task row reaches Redis through here, so a test mode swaps
    this one object instead of branching on the schedule, cancel and
    execution paths. A test mode names its indexer class by dotted path
    (:data:`~django_delayq.conf.schema.TEST_MODES`), loaded as Django loads
    a backend: no module of the package imports the toolkit.
    """
    global _chosen
    settings = get_settings()
    chosen = _chosen
    if chosen is None or chosen[0] is not settings:
        found: Indexer = _REDIS
        if settings.test_mode is not None:
            found = _load_indexer(settings.test_mode)
        chosen = _chosen = (settings, found)
    return chosen[1]


def _load_indexer(test_mode: str) -> Indexer:
    """The indexer ``DELAYQ["TEST_MODE"]`` names, or a configuration error
    that says what to write instead (the settings check saw only its form)."""
    path = indexer_path(test_mode)
    try:
        found = import_string(path)
    except ImportError as exc:
        raise InvalidConfiguration(
            f'DELAYQ["TEST_MODE"] = {test_mode!r}: cannot import {path!r} ({exc}). '
            'Use "manual", "immediate", or the dotted path of a class with '
            "index() and unindex() methods."
        ) from exc
    indexer = found() if isinstance(found, type) else found
    if not (
        callable(getattr(indexer, "index", None))
        and callable(getattr(indexer, "unindex", None))
    ):
        raise InvalidConfiguration(
            f'DELAYQ["TEST_MODE"] = {test_mode!r}: {path} has no index() and '
            'unindex() methods. Use "manual", "immediate", or the dotted path '
            "of a class with index(tasks, action, using) and "
            "unindex(tasks, action, using) methods."
        )
    return indexer  # type: ignore[no-any-return]


def index_after_commit(tasks: Sequence[DelayedTask], action: str, using: str) -> None:
    """Add the tasks to their due-sets once the current transaction commits."""
    indexer().index(tasks, action, using)


def unindex_after_commit(tasks: Sequence[DelayedTask], action: str, using: str) -> None:
    """Remove the tasks from their due-sets once the current transaction commits."""
    indexer().unindex(tasks, action, using)


def _write(
    entries: list[index.IndexEntry], action: str, using: str, *, add: bool
) -> None:
    scopes = {breaker_scope(entry.queue, entry.shard) for entry in entries}
    skipped = breaker_reason(scopes)
    if skipped is not None:
        _to_outbox(
            entries, action, using, f"skipped, Redis failed just before: {skipped}"
        )
        return
    try:
        client = get_client("schedule")
        # Another project's loops would take our ids in their due-sets for
        # lost tasks of theirs (delayq.E014): while the prefix is theirs,
        # nothing of ours is written there, and the outbox keeps the write
        # until the sweeper, which refuses to run meanwhile, can replay it.
        check_prefix_for_writes(client, using)
        if add:
            index.add(entries, client)
        else:
            index.remove(entries, client)
    except KeyPrefixInUse as exc:
        # Redis answers: no breaker to trip, the settings are what is wrong.
        logger.error(
            "django-delayq: %d task(s) not indexed in Redis but kept in the "
            "outbox until the prefix is this project's: %s",
            len(entries),
            exc,
        )
        _to_outbox(entries, action, using, str(exc))
    except Exception as exc:
        note_failure(exc, scopes)
        # Whatever went wrong, the rows are committed: the caller must not see
        # an error for work that will happen. The outbox makes sure it does.
        logger.warning(
            "django-delayq: Redis write for %d task(s) failed (%s); "
            "queued in the outbox for replay.",
            len(entries),
            error_text(exc),
        )
        _to_outbox(entries, action, using, error_text(exc))


def _to_outbox(
    entries: list[index.IndexEntry], action: str, using: str, error: str
) -> None:
    rows = [
        OutboxEntry(
            task_id=entry.task_id,
            queue=entry.queue,
            shard=entry.shard,
            action=action,
            last_error=error,
        )
        for entry in entries
    ]
    try:
        OutboxEntry.objects.using(using).bulk_create(rows, batch_size=1000)
    except DatabaseError:
        # Both stores failed at once. The committed rows are still the truth;
        # reconciliation of scheduled rows against Redis re-indexes them.
        logger.exception(
            "django-delayq: could not write %d outbox entries either; these "
            "tasks are not indexed until the rows are reconciled: %s",
            len(rows),
            ", ".join(str(entry.task_id) for entry in entries),
        )
        return
    signals.notify(
        signals.outbox_written, OutboxEntry, queues=[e.queue for e in entries]
    )


@dataclass(frozen=True)
class ReplayResult:
    replayed: int
    failed: int


def replay_outbox(
    *,
    batch_size: int = 500,
    using: str | None = None,
    now: datetime.datetime | None = None,
) -> ReplayResult:
    """Make Redis agree with the rows named by due outbox entries.

    Each entry is replayed from the row's *current* state: a scheduled task is
    (re-)added at its ``run_at``, anything else is removed from the due-set.
    Replayed entries are deleted; on a Redis error they stay, with the error
    and an exponential backoff before the next try.
    """
    db = using or write_db()
    now = timezone.now() if now is None else now
    entries = list(
        OutboxEntry.objects.using(db)
        .filter(next_attempt_at__lte=now)
        .order_by("id")[:batch_size]
    )
    if not entries:
        return ReplayResult(0, 0)
    rows = DelayedTask.objects.using(db).in_bulk({entry.task_id for entry in entries})
    to_add, to_remove = [], []
    for entry in entries:
        row = rows.get(entry.task_id)
        if row is not None and row.status == Status.SCHEDULED:
            to_add.append(entry_of(row))
        else:
            to_remove.append(
                index.IndexEntry(entry.task_id, entry.queue, entry.shard, 0)
            )
    try:
        client = get_client("schedule")
        # As for schedule()'s writes (and the admin's "Replay now", which the
        # sweeper's own check does not cover): never into the due-sets of
        # another project on this prefix.
        check_prefix_for_writes(client, db)
        index.add(_unique(to_add), client)
        index.remove(_unique(to_remove), client)
    except Exception as exc:
        _postpone(entries, error_text(exc), db, now)
        logger.warning(
            "django-delayq: outbox replay of %d entries failed: %s", len(entries), exc
        )
        return ReplayResult(0, len(entries))
    OutboxEntry.objects.using(db).filter(
        pk__in=[entry.pk for entry in entries]
    ).delete()
    signals.notify(
        signals.outbox_replayed, OutboxEntry, queues=[e.queue for e in entries]
    )
    return ReplayResult(len(entries), 0)


def _unique(entries: Iterable[index.IndexEntry]) -> list[index.IndexEntry]:
    return list({entry.task_id: entry for entry in entries}.values())


def _postpone(
    entries: list[OutboxEntry], error: str, db: str, now: datetime.datetime
) -> None:
    for entry in entries:
        entry.attempts += 1
        delay = min(2.0 ** (entry.attempts - 1), _REPLAY_BACKOFF_CAP)
        entry.next_attempt_at = now + datetime.timedelta(seconds=delay)
        entry.last_error = error
    OutboxEntry.objects.using(db).bulk_update(
        entries, ["attempts", "next_attempt_at", "last_error"], batch_size=500
    )
