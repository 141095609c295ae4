"""The sweeper's loop and its pass: :class:`Sweeper`, and what a pass did
(:class:`SweepResult`). What a pass does, and in which order, is said in
:mod:`django_delayq.sweeper`; the repairs of one shard are in
:mod:`~django_delayq.reconcile.shard`.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError
from django.utils import timezone

from .. import registry, signals
from ..conf import get_settings
from ..exceptions import RedisUnavailable
from ..ids import process_name
from ..limits.groups import limited_queues, shard_numbers
from ..models import DelayedTask, Status, write_db
from ..outbox import replay_outbox
from ..ownership import check_prefix_if_reachable
from ..queues import mirror
from ..reconcile.reads import read_in_run_at_order
from ..reconcile.rebuild import restore_slots
from ..reconcile.shard import Repairs, ShardRows, Window, repair_shard
from ..recurring.keeper import Keeper
from ..store import epochs, leases
from ..store.backoff import Backoff
from ..store.connection import Client, get_client
from ..store.errors import Answers, error_text
from ..store.keys import shard_keys, sweeper_lock_key, sweepers_key
from ..store.stats import MISSED_PASSES, pass_ttl

__all__ = ["BATCH", "LOCK_MS", "MISSED_PASSES", "SweepResult", "Sweeper", "pass_ttl"]

logger = logging.getLogger(__name__)

#: Rows per query or delete batch.
BATCH = 1000
#: The sweep lock's time to live for a single sweep() call. A looping
#: sweeper uses twice its interval (at least 2 s). A pass renews the lock as
#: it goes (per shard, per batch), so a sweeper killed mid-pass holds up its
#: replacement for that long, not for a whole pass.
LOCK_MS = 10_000
#: The interval a sweep() outside run() announces (the command's default).
DEFAULT_INTERVAL = 30.0
#: The counts of a pass, in the order its line (and ``delayq_sweep --once``)
#: gives them.
COUNTS = (
    "replayed",
    "reindexed",
    "removed",
    "corrected",
    "recovered",
    "failed",
    "pruned",
    "replaced",
    "unreachable",
)


@dataclass
class SweepResult(Repairs):
    """What one pass did: its shards' repairs, and the rest of the pass;
    ``str()`` is the line a pass logs."""

    replayed: int = 0
    pruned: int = 0
    #: shards left for a later pass because their Redis did not answer (a
    #: Redis Cluster node failing over; on one Redis the pass fails instead)
    unreachable: int = 0
    skipped: bool = False  # another sweeper held the lock

    def __str__(self) -> str:
        if self.skipped:
            return "skipped: another sweeper is running a pass"
        text = ", ".join(f"{name} {getattr(self, name)}" for name in COUNTS)
        if self.oldest_lost is not None:
            due = self.oldest_lost.isoformat(sep=" ", timespec="milliseconds")
            text += f" (the oldest reindexed task was due at {due})"
        return text

    @property
    def repaired(self) -> int:
        return (
            self.reindexed
            + self.removed
            + self.corrected
            + self.recovered
            + self.replaced
        )


class _LockLost(Exception):
    pass


class Sweeper:
    """Run sweep passes; see :mod:`django_delayq.sweeper` for what one pass does.

    :param progress: called with a line of text when a pass has a lot to do.
    """

    def __init__(self, *, progress: Callable[[str], None] | None = None) -> None:
        self.settings = get_settings()
        # Rows are read from the primary, like the workers do: a lagging
        # replica could make a task scheduled a moment ago look like a ghost.
        self.db = write_db()
        self.progress = progress or (lambda line: None)
        self.token = process_name()
        self._stopping = threading.Event()
        self._lock_ms = LOCK_MS
        self._interval = DEFAULT_INTERVAL

    def run(self, *, interval: float = 30.0, once: bool = False) -> SweepResult:
        """Sweep every ``interval`` seconds until :meth:`stop`; return the last pass."""
        result = SweepResult()
        # Passes in a row that Redis or the database cut short: each waits
        # the interval, as a pass that worked does.
        backoff = Backoff(
            "sweep",
            logger,
            base=interval / 2,
            cap=interval,
            again="Redis and the database answer again",
            tries="pass(es)",
        )
        self._lock_ms = max(2000, int(2 * interval * 1000))
        self._interval = interval
        # A looping sweeper also keeps the periodic schedules planned (a
        # pass from cron does not: it does not live to the next tick).
        keeper = None if once else Keeper("sweeper")
        if keeper is not None:
            keeper.start()
        try:
            return self._loop(interval, once, backoff, result)
        finally:
            if keeper is not None:
                keeper.stop()

    def _loop(
        self, interval: float, once: bool, backoff: Backoff, result: SweepResult
    ) -> SweepResult:
        first = True
        while not self._stopping.is_set():
            try:
                result = self.sweep()
                backoff.answered()
                if (
                    result.repaired
                    or result.replayed
                    or result.failed
                    or result.unreachable
                ):
                    logger.warning("sweep: %s", result)
                elif result.pruned or first:
                    # The first pass says the sweeper is up and working.
                    logger.info("sweep: %s", result)
                else:
                    # A pass with nothing to do is the usual case: at INFO it
                    # would fill the log every interval.
                    logger.debug("sweep: %s", result)
                first = False
            except (RedisUnavailable, DatabaseError) as exc:
                if once:
                    raise
                backoff.failed(exc)  # the wait is the interval, below
            if once:
                # A pass run from cron stays counted for a few --interval.
                return result
            self._stopping.wait(interval)
        self._leave()
        return result

    def stop(self) -> None:
        self._stopping.set()

    def sweep(self, *, now: datetime.datetime | None = None) -> SweepResult:
        """One pass, under the sweep lock; ``sweep_finished`` follows it."""
        result = self._pass(timezone.now() if now is None else now)
        signals.notify(signals.sweep_finished, Sweeper, result=result)
        return result

    def _pass(self, now: datetime.datetime) -> SweepResult:
        client = get_client("loop")
        lock = sweeper_lock_key(self.settings.key_prefix)
        # The lock outlives a slow pass comfortably; a crashed holder's
        # lock expires by itself.
        if not leases.take(client, lock, self.token, self._lock_ms):
            # Alive, and another sweeper is passing: both are as good.
            self._announce(client)
            return SweepResult(skipped=True)
        self._lock = (client, lock)
        result = SweepResult()
        try:
            # Every pass: a ghost is a due entry with no row, and another
            # project's entries all look like ghosts (django_delayq.ownership).
            check_prefix_if_reachable()
            result.replayed = self._replay(now)
            mirror(client)
            self._reconcile(client, now, result)
            self._prune(now, result)
        except _LockLost:
            logger.warning(
                "sweep: lost the sweep lock mid-pass; another sweeper took over"
            )
            return result
        finally:
            # Only if it is still ours (compare and delete, atomically).
            leases.release(client, lock, self.token)
        # Only a pass that ended counts: one cut short by Redis or the
        # database raised above, and repaired nothing.
        self._announce(client)
        return result

    @property
    def member(self) -> str:
        """This sweeper in ``<prefix>:sweepers``: its token and interval."""
        return f"{self.token}#{self._interval:g}"

    def _announce(self, client: Client) -> None:
        try:
            leases.beat(
                client,
                sweepers_key(self.settings.key_prefix),
                self.member,
                int(pass_ttl(self._interval) * 1000),
                prune=True,  # one command every interval: cheap enough
            )
        except RedisUnavailable as exc:
            # The pass is done; only delayq_status misses it (and says so).
            logger.warning("sweep: the pass could not be recorded: %s", error_text(exc))

    def _leave(self) -> None:
        """A graceful stop: no longer counted as a sweeper at once."""
        try:
            leases.leave(
                get_client("loop"), sweepers_key(self.settings.key_prefix), self.member
            )
        except RedisUnavailable as exc:
            logger.debug("sweep: not removed from the sweepers: %s", exc)

    def _renew_lock(self) -> None:
        client, lock = self._lock
        if not leases.take(client, lock, self.token, self._lock_ms):
            # Expired (this pass stalled) and taken: the other sweeper goes on.
            raise _LockLost

    # -- 1. outbox ------------------------------------------------------------

    def _replay(self, now: datetime.datetime) -> int:
        total = 0
        while True:
            outcome = replay_outbox(batch_size=BATCH, now=now)
            total += outcome.replayed
            if outcome.replayed < BATCH:
                return total

    # -- 2-4. reconcile ---------------------------------------------------------

    def _reconcile(
        self, client: Client, now: datetime.datetime, result: SweepResult
    ) -> None:
        horizon = now + datetime.timedelta(seconds=self.settings.reconcile_horizon)
        stale_before = now - datetime.timedelta(
            seconds=self.settings.visibility_timeout
        )
        # A shard whose index marker is gone lost its data: this pass
        # rebuilds it, so it claims the rebuild (and marks it done below)
        # before reading the rows, as a dispatcher would (reconcile.rebuild).
        claimed = self._claim_lost(client)
        # Rows first: anything indexed after this read is found below. In
        # batches, the most overdue first (they go back first), with no
        # server-side cursor (see reconcile.reads: PgBouncer).
        scheduled: dict[tuple[str, int], list[DelayedTask]] = defaultdict(list)
        for row in read_in_run_at_order(
            DelayedTask.objects.using(self.db)
            .due(by=horizon)
            .only("id", "queue", "shard", "run_at", "status", "attempts", "priority"),
            BATCH,
        ):
            scheduled[row.queue, row.shard].append(row)
        running: dict[tuple[str, int], list[DelayedTask]] = defaultdict(list)
        for row in read_in_run_at_order(
            DelayedTask.objects.using(self.db)
            .filter(status=Status.RUNNING, started_at__lt=stale_before)
            .only(
                "id",
                "queue",
                "shard",
                "run_at",
                "status",
                "attempts",
                "max_attempts",
                "priority",
            ),
            BATCH,
        ):
            running[row.queue, row.shard].append(row)
        todo = sum(map(len, scheduled.values()))
        if todo > 10 * BATCH:
            self.progress(f"reconciling {todo} scheduled rows due before {horizon}")
        shards = set(scheduled) | set(running) | self._configured_shards()
        window = Window(self.db, client, now, horizon)
        answers = Answers()
        for queue, shard in sorted(shards):
            self._renew_lock()
            try:
                rows = ShardRows(
                    shard_keys(self.settings.key_prefix, queue, shard),
                    scheduled.get((queue, shard), []),
                    running.get((queue, shard), []),
                )
                result.add(repair_shard(window, rows))
                if (queue, shard) in claimed and rows.keys.limited:
                    restore_slots(client, self.db, rows.keys)
                if (queue, shard) in claimed:
                    # False if the claim expired during a long pass: the
                    # next move sees the marker gone and rebuilds again.
                    epochs.mark_rebuilt(client, rows.keys, self.token)
            except RedisUnavailable as exc:
                if not self.settings.cluster:
                    raise  # one Redis: every other shard fails the same way
                answers.failed(exc)
                result.unreachable += 1
                logger.warning(
                    "sweep: shard %s:%d left for a later pass (%s)",
                    queue,
                    shard,
                    error_text(exc),
                )
                continue
            answers.answer()
        # No node answered: the pass failed as a whole.
        answers.raise_if_none_answered()

    def _claim_lost(self, client: Client) -> set[tuple[str, int]]:
        """The configured shards whose index marker was gone, now claimed
        by this pass (see :mod:`django_delayq.store.epochs`)."""
        claimed = set()
        for queue, shard in sorted(self._configured_shards()):
            keys = shard_keys(self.settings.key_prefix, queue, shard)
            try:
                if epochs.claim(client, keys, self.token):
                    claimed.add((queue, shard))
            except RedisUnavailable:
                if not self.settings.cluster:
                    raise
                # Its node is failing over: the shard's repair below says so.
        return claimed

    def _configured_shards(self) -> set[tuple[str, int]]:
        registry.autodiscover()  # the tasks' limits
        limited = limited_queues(get_client("loop"))
        return {
            (queue.name, number)
            for queue in self.settings.queues.values()
            for number in shard_numbers(queue, limited)
        }

    # -- 5. prune ---------------------------------------------------------------

    def _prune(self, now: datetime.datetime, result: SweepResult) -> None:
        for statuses, seconds in (
            ((Status.SUCCEEDED, Status.CANCELLED), self.settings.retain_succeeded),
            ((Status.FAILED,), self.settings.retain_failed),
        ):
            cutoff = now - datetime.timedelta(seconds=seconds)
            while True:
                # Small batches keep each DELETE's locks short.
                batch = list(
                    DelayedTask.objects.using(self.db)
                    .filter(status__in=statuses, finished_at__lt=cutoff)
                    .values_list("pk", flat=True)[:BATCH]
                )
                if not batch:
                    break
                self._renew_lock()
                DelayedTask.objects.using(self.db).filter(pk__in=batch).delete()
                result.pruned += len(batch)
