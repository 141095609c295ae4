"""Repairs of one shard, in a sweep pass or a rebuild after a loss: lost
tasks indexed again, wrong scores corrected, ghosts removed, stuck running
tasks recovered.

On a Redis Cluster each shard is one slot, so a node that fails fails its
shards only; :class:`~django_delayq.sweeper.Sweeper` goes on with the others.
See the sweeper's docstring for the order of reads and why a row that looks
lost is read again before it is repaired.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from dataclasses import dataclass, fields

from django.db import transaction

from .. import transitions
from ..models import DelayedTask, OutboxEntry, Status
from ..outbox import entry_of, index_after_commit
from ..outcomes import fail, worker_lost
from ..store import broken, index, inspect
from ..store.connection import Client
from ..store.keys import ShardKeys, encode_member
from ..timing import to_score

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Window:
    """What one pass reconciles, shard by shard: the rows of ``db`` against
    the Redis of ``client``, up to ``horizon``, as of ``now``."""

    db: str
    client: Client
    now: datetime.datetime
    horizon: datetime.datetime


@dataclass(frozen=True)
class ShardRows:
    """One shard's rows, as the pass read them before it read Redis."""

    keys: ShardKeys
    #: its scheduled rows due before the horizon, the most overdue first
    scheduled: list[DelayedTask]
    #: its rows running since before the visibility timeout
    running: list[DelayedTask]


@dataclass
class Repairs:
    """What the repair of one shard did; a pass adds them up (its
    :class:`~django_delayq.sweeper.SweepResult` is a ``Repairs`` too)."""

    reindexed: int = 0
    removed: int = 0
    corrected: int = 0
    recovered: int = 0
    failed: int = 0
    #: keys of a shard that held another type (set by hand?), deleted
    replaced: int = 0
    #: when the most overdue of the reindexed tasks was due
    oldest_lost: datetime.datetime | None = None

    def add(self, repairs: Repairs) -> None:
        """Count another shard's repairs in these."""
        for f in fields(Repairs):
            if f.name != "oldest_lost":
                setattr(self, f.name, getattr(self, f.name) + getattr(repairs, f.name))
        lost = repairs.oldest_lost
        if lost is not None and (self.oldest_lost is None or lost < self.oldest_lost):
            self.oldest_lost = lost


def repair_shard(
    window: Window, shard: ShardRows, *, replace_broken: bool = True
) -> Repairs:
    """Reconcile one shard's rows with its due-sets and ready streams; with
    ``replace_broken``, first replace its keys of a wrong type (else such a
    key fails the repair with ``WRONGTYPE``)."""
    client, keys = window.client, shard.keys
    result = Repairs()
    if not replace_broken:
        return _reconcile(window, shard, result)
    # A key of another type (set by hand?) fails every command on it:
    # replace it first, and what it indexed is indexed again below.
    result.replaced += broken.replace_wrong_types(
        client,
        {
            **{due: "zset" for due in keys.due_bands},
            **{stream: "stream" for stream in keys.ready_bands},
            keys.wake: "list",
            keys.dead: "stream",
        },
    )
    return _reconcile(window, shard, result)


def _reconcile(window: Window, shard: ShardRows, result: Repairs) -> Repairs:
    db, client, keys = window.db, window.client, shard.keys
    rows = shard.scheduled
    scores = inspect.due_scores(client, keys, [row.pk for row in rows])
    # An id in any band's stream is on its way to a worker: indexing it
    # again would run it twice.
    in_stream = inspect.stream_task_ids(client, keys.ready_bands)
    if keys.limited:
        # Waiting for a limit is on its way too (see django_delayq.limits).
        in_stream |= inspect.waiting_task_ids(client, keys.base)
    lost = [row for row in rows if not scores[row.pk] and row.pk not in in_stream]
    wrong = [
        row for row in rows if scores[row.pk] and _misplaced(keys, row, scores[row.pk])
    ]
    unchanged = _unchanged(db, lost + wrong)
    lost = [row for row in lost if row.pk in unchanged]
    wrong = [row for row in wrong if row.pk in unchanged]
    if lost or wrong:
        # Removed before the right member is added: never both, and a
        # crash in between leaves a lost task, which the next pass finds.
        for due, strays in _strays(keys, wrong, scores).items():
            index.remove_members(client, due, strays)
        index.add([entry_of(row) for row in lost + wrong], client)
        result.reindexed += len(lost)
        result.corrected += len(wrong)
        if lost:
            result.oldest_lost = lost[0].run_at
        for row in lost:
            logger.debug("sweep: task %s was missing from Redis; indexed again", row.pk)
    for due in keys.due_bands:
        result.removed += _remove_ghosts(window, due)
    for row in shard.running:
        if row.pk not in in_stream:
            _recover(window, row, result)
    return result


def _misplaced(
    keys: ShardKeys, row: DelayedTask, scores: dict[inspect.Place, int]
) -> bool:
    """Whether a row's members are not exactly one, its id in its band's
    due-set, at its due time: a wrong score, a wrong band or a legacy member
    (see :mod:`~.store.keys`) is repaired alike."""
    return scores != {_place(keys, row): to_score(row.run_at)}


def _place(keys: ShardKeys, row: DelayedTask) -> inspect.Place:
    return keys.due_of(row.priority), encode_member(row.pk)


def _strays(
    keys: ShardKeys,
    rows: list[DelayedTask],
    scores: dict[uuid.UUID, dict[inspect.Place, int]],
) -> dict[str, list[bytes]]:
    """The members of ``rows`` other than their right one, by due-set."""
    strays: dict[str, list[bytes]] = {}
    for row in rows:
        for due, member in scores[row.pk]:
            if (due, member) != _place(keys, row):
                strays.setdefault(due, []).append(member)
    return strays


def _unchanged(db: str, rows: list[DelayedTask]) -> set[uuid.UUID]:
    """Those of ``rows`` still scheduled as read (same due time, same
    attempt), read again now that Redis has been read.

    A task that finished, was retried or rescheduled between the reads
    left Redis by its own path and is indexed by its own write (or the
    outbox); repairing it would be a false alarm, or put back a stale
    due time.
    """
    if not rows:
        return set()
    now = {
        pk: (run_at, attempts)
        for pk, run_at, attempts in DelayedTask.objects.using(db)
        .filter(pk__in=[row.pk for row in rows], status=Status.SCHEDULED)
        .values_list("pk", "run_at", "attempts")
    }
    return {row.pk for row in rows if now.get(row.pk) == (row.run_at, row.attempts)}


def _remove_ghosts(window: Window, due: str) -> int:
    """Remove members in the window whose row is not scheduled (or is gone)."""
    db, client = window.db, window.client
    removed = 0
    for page in inspect.due_members(client, due, to_score(window.horizon)):
        ids = [task_id for task_id, _, _ in page if task_id is not None]
        still = set(
            DelayedTask.objects.using(db)
            .filter(pk__in=ids, status=Status.SCHEDULED)
            .values_list("pk", flat=True)
        )
        ghosts = [member for task_id, member, _ in page if task_id not in still]
        if ghosts:
            # A row scheduled again meanwhile is re-added by its own
            # on-commit write, or by the next pass.
            removed += index.remove_members(client, due, ghosts)
    return removed


def _recover(window: Window, row: DelayedTask, result: Repairs) -> None:
    """A running row whose worker and stream entry are both gone."""
    db = window.db
    if transitions.claimed_in_batch(row):
        # Claimed in a batch whose worker is gone: nothing says it ever
        # started, so it goes back uncounted (see transitions).
        with transaction.atomic(using=db):
            handed = transitions.hand_back([row], db)
            index_after_commit(handed, OutboxEntry.Action.RESCHEDULE, db)
        if handed:
            result.recovered += 1
            logger.warning(
                "sweep: task %s was claimed in a batch whose worker is gone "
                "(no stream entry left); scheduled again, uncounted",
                row.pk,
            )
        return
    error = worker_lost(row, " (no stream entry left)")
    if row.attempts >= row.max_attempts:
        # Logged and signalled like any failure.
        if fail(row, row.attempts, error, "", expect=Status.RUNNING):
            result.failed += 1
        return
    with transaction.atomic(using=db):
        if transitions.recover(row, window.now, error, db):
            index_after_commit([row], OutboxEntry.Action.RESCHEDULE, db)
            result.recovered += 1
            logger.warning("sweep: task %s: %s; scheduled again", row.pk, error)
