"""Rebuilding shards' indexes at once after Redis lost data, from whichever
loop noticed (a dispatcher, on the reply of a move; see
:mod:`django_delayq.store.epochs` for the signals), rather than at the
sweeper's next pass.

Each shard is claimed first, so that of several processes noticing the same
loss one rebuilds each shard and the others go on (no thundering herd on
the database). Claimed before the rows are read: a task indexed and lost
before the claim is among the rows read after it. The rebuild is the
sweeper's reconciliation (:func:`~.shard.repair_shard`) of its
moving window, the stuck-work recovery left to the sweeper: soonest first,
the rows due within :data:`SOON` over every claimed shard, then the rest of
the window. Only rows due within ``RECONCILE_HORIZON`` are read, so the
cost does not grow with a far-future backlog, which the sweeper's moving
window indexes as it comes due.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections import defaultdict
from collections.abc import Sequence
from functools import reduce
from operator import or_

from django.db.models import Q
from django.utils import timezone

from ..conf import get_settings
from ..exceptions import RedisUnavailable
from ..limits.groups import group_of_row, rules_of
from ..models import DelayedTask, Status, write_db
from ..store import epochs, limits
from ..store.connection import Client
from ..store.errors import error_text
from ..store.keys import ShardKeys
from ..timing import to_score
from ..transitions import delivery_of
from .reads import read_in_run_at_order
from .shard import Repairs, ShardRows, Window, repair_shard

logger = logging.getLogger(__name__)

#: What a stream entry id looks like (a claim by the testing toolkit is not one).
STREAM_ID = re.compile(r"^\d+-\d+$")

#: Rows per query batch.
BATCH = 1000

#: Seconds ahead whose tasks every claimed shard gets back before the rest
#: of any shard's window.
SOON = 30.0


def rebuild(
    client: Client, shards: Sequence[ShardKeys], token: str, *, force: bool
) -> tuple[list[ShardKeys], Repairs]:
    """Claim and rebuild the index of those of ``shards`` that lost data
    (``force``: whose Redis restarted; see :func:`~.store.epochs.claim`);
    the shards rebuilt, and what was repaired.

    Raises ``RedisUnavailable`` or ``DatabaseError`` if a rebuild could not
    be finished: the claims of the shards left expire, and the next move on
    them sees the loss again.
    """
    claimed = [
        keys for keys in shards if epochs.claim(client, keys, token, force=force)
    ]
    result = Repairs()
    if not claimed:
        return [], result
    settings = get_settings()
    db = write_db()
    now = timezone.now()
    horizon = now + datetime.timedelta(seconds=settings.reconcile_horizon)
    soon = min(now + datetime.timedelta(seconds=SOON), horizon)
    for until in dict.fromkeys((soon, horizon)):
        rows = _scheduled(db, claimed, until)
        window = Window(db, client, now, until)
        # The shard whose next task is due first goes first.
        for keys in sorted(claimed, key=lambda k: _first_due(rows, k, until)):
            scheduled = rows.get((keys.queue, keys.shard), [])
            try:
                # A key of a wrong type is left to the sweeper, which
                # replaces it (see store.broken); so is the shard.
                result.add(
                    repair_shard(
                        window, ShardRows(keys, scheduled, []), replace_broken=False
                    )
                )
            except RedisUnavailable as exc:
                if exc.unreachable:
                    raise
                logger.error(
                    "shard %s:%d: its index could not be rebuilt (%s); left to "
                    "the sweeper",
                    keys.queue,
                    keys.shard,
                    error_text(exc),
                )
    for keys in claimed:
        if keys.limited:
            restore_slots(client, db, keys)
    for keys in claimed:
        if not epochs.mark_rebuilt(client, keys, token):
            # Lost again meanwhile, or taken over: the next move sees it.
            logger.warning(
                "shard %s:%d: its Redis lost data again while its index was "
                "being rebuilt (or another process took the rebuild over)",
                keys.queue,
                keys.shard,
            )
    return claimed, result


def restore_slots(client: Client, db: str, keys: ShardKeys) -> None:
    """Take the limits' slots of the shard's running rows again: they run
    (or their worker died and the sweeper recovers them), and a limit must
    count them before it admits anything new; and the starts, within the
    longest rate period of the queue's limits, of the rows that ended since
    (read on the ``(status, finished_at)`` index)."""
    rules = rules_of(get_settings().queue(keys.queue))
    rows = DelayedTask.objects.using(db).filter(queue=keys.queue, shard=keys.shard)
    fields = ("id", "name", "queue", "args", "kwargs", "claim_entry", "started_at")
    found = [(row, True) for row in rows.filter(status=Status.RUNNING).only(*fields)]
    periods = [rule.rate.period_ms for rule in rules.values() if rule.rate]
    if periods:
        since = timezone.now() - datetime.timedelta(milliseconds=max(periods))
        found += [
            (row, False)
            for row in rows.filter(
                status__in=(Status.SUCCEEDED, Status.FAILED),
                finished_at__gte=since,
                started_at__gte=since,
            ).only(*fields)
        ]
    attempts = []
    for row, running in found:
        group = group_of_row(row)
        entry = delivery_of(row.claim_entry)
        if group is None or not STREAM_ID.match(entry):
            continue
        started = row.started_at or timezone.now()
        attempts.append((entry, group, to_score(started), running))
    if attempts:
        limits.restore(client, keys, rules, attempts)
        logger.info(
            "limits of queue %s: took the slots of %d running task(s) and the "
            "starts of %d ended one(s) again",
            keys.queue,
            sum(running for *_, running in attempts),
            sum(not running for *_, running in attempts),
        )


def _scheduled(
    db: str, shards: Sequence[ShardKeys], until: datetime.datetime
) -> dict[tuple[str, int], list[DelayedTask]]:
    """The shards' scheduled rows due by ``until``, the most overdue first."""
    by_queue: dict[str, list[int]] = defaultdict(list)
    for keys in shards:
        by_queue[keys.queue].append(keys.shard)
    where = reduce(
        or_, (Q(queue=queue, shard__in=numbers) for queue, numbers in by_queue.items())
    )
    rows: dict[tuple[str, int], list[DelayedTask]] = defaultdict(list)
    # In batches, with no server-side cursor (see .reads: PgBouncer).
    for row in read_in_run_at_order(
        DelayedTask.objects.using(db)
        .due(by=until)
        .filter(where)
        .only("id", "queue", "shard", "run_at", "status", "attempts", "priority"),
        BATCH,
    ):
        rows[row.queue, row.shard].append(row)
    return rows


def _first_due(
    rows: dict[tuple[str, int], list[DelayedTask]],
    keys: ShardKeys,
    until: datetime.datetime,
) -> datetime.datetime:
    shard_rows = rows.get((keys.queue, keys.shard))
    return shard_rows[0].run_at if shard_rows else until
