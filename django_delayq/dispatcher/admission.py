"""The dispatcher's part in flow control: on a queue's limits shard, admit
what the limits allow instead of moving every due id.

One round: ``limits.lua`` admits what fits and answers with the ids that
fell due since; the dispatcher reads their rows, works out each one's group
(the limits it is under, with their keys: :mod:`django_delayq.limits.groups`)
and hands them back to be placed in their groups' lines, admitted at once
where the limits have room. Ids whose row is no longer scheduled are
dropped. A row read costs one query per round, only for tasks under limits.

The next round is timed like a move: at the earliest due time, or the
earliest moment a limit may have room again (a rate window sliding, a lease
expiring). A worker's release admits the next tasks itself, without the
dispatcher.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence

from django.db import DatabaseError

from ..conf import get_settings
from ..limits.groups import group_of_row, rules_of
from ..models import DelayedTask, Status, write_db
from ..signals import notify, task_throttled
from ..store import index, limits
from ..store.connection import Client
from ..timing import to_score
from .leases import DispatchStats, Shard

logger = logging.getLogger(__name__)

#: Seconds before a round that could not read the rows is tried again.
DATABASE_RETRY = 1.0


class Admission:
    def __init__(self, stats: DispatchStats, stopping: threading.Event) -> None:
        self.stats = stats
        self.stopping = stopping
        #: the last round's reply, as a move's, for the loss checks
        self.last: index.Moved | None = None

    def admit(self, client: Client, shard: Shard) -> None:
        """Admit what fits on one limits shard, and time the next round."""
        rules = rules_of(get_settings().queue(shard.keys.queue))
        placements: list[limits.Placement] = []
        dropped: list[uuid.UUID] = []
        self.last = None
        while not self.stopping.is_set():
            sent = time.monotonic()
            reply = limits.admit(client, shard.keys, rules, placements, dropped)
            self.last = index.Moved(
                reply.admitted,
                reply.head,
                reply.redis_ms,
                reply.redis_us,
                reply.marked,
                reply.reloaded,
            )
            if not reply.marked:
                # Redis lost the shard's data: rebuilt first (see the loop).
                shard.due_at = time.monotonic()
                return
            if reply.admitted:
                self.stats.moved += reply.admitted
                self.stats.batches += 1
                self.stats.per_shard[shard.label] = (
                    self.stats.per_shard.get(shard.label, 0) + reply.admitted
                )
            if reply.throttled:
                notify(
                    task_throttled,
                    DelayedTask,
                    queue=shard.keys.queue,
                    task_ids=reply.throttled,
                )
            if reply.due:
                try:
                    placements, dropped = describe(reply.due)
                except DatabaseError as exc:
                    logger.warning(
                        "dispatcher: could not read the rows of %d task(s) due "
                        "on %s to admit them: %s; trying again in %g s",
                        len(reply.due),
                        shard.label,
                        exc,
                        DATABASE_RETRY,
                    )
                    shard.due_at = time.monotonic() + DATABASE_RETRY
                    return
                continue
            if reply.admitted >= limits.ADMIT_BATCH:
                placements, dropped = [], []
                continue  # more may fit now
            redis_ms = reply.redis_ms + reply.redis_us / 1000
            shard.due_at = (
                None if reply.head < 0 else sent + (reply.head - redis_ms) / 1000
            )
            return


def describe(
    ids: Sequence[uuid.UUID],
) -> tuple[list[limits.Placement], list[uuid.UUID]]:
    """The placements of the due ``ids`` whose row is scheduled, and the
    others (to drop from the due-sets)."""
    rows = {
        row.pk: row
        for row in DelayedTask.objects.using(write_db())
        .filter(pk__in=ids)
        .only("id", "name", "queue", "args", "kwargs", "priority", "run_at", "status")
    }
    placements, dropped = [], []
    for task_id in ids:
        row = rows.get(task_id)
        if row is None or row.status != Status.SCHEDULED:
            dropped.append(task_id)
            continue
        # A task no longer registered is admitted at once (no group): its
        # worker dead-letters it.
        group = group_of_row(row) or ""
        placements.append(
            limits.Placement(task_id, group, row.priority, to_score(row.run_at))
        )
    return placements, dropped
