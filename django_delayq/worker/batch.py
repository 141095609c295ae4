"""What a worker thread does with the stream entries it took.

1. An entry that names no task is dead-lettered; no code runs.
2. Every other entry's task is claimed in one statement if its row is
   simply scheduled and due (the common case).
3. The claimed tasks run in groups (:mod:`django_delayq.worker.group_commit`),
   each group committed once and its entries acknowledged in one round trip;
   a task that cannot share a transaction (``atomic=False``, or one seen to
   be slow) runs alone.
4. The rest (early, running, finished, missing rows, reclaimed deliveries)
   take the one-row path (:func:`django_delayq.worker.execution.execute`).

``pending`` is the batch still to handle, and this module removes each entry
from it as soon as the entry is finished with: when a database error cuts
the batch short, what is left in it is exactly what the worker must try
again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from .. import registry, signals, transitions
from ..exceptions import TaskNotRegistered
from ..limits.slots import Slots
from ..models import DelayedTask, Status, write_db
from ..store import activity, streams
from ..store.connection import Client
from .execution import Disposition, Outcome, execute, start, unknown_task
from .group_commit import Pacer, run_group
from .time_limits import Abandoned, Watchdog

logger = logging.getLogger(__name__)


@dataclass
class BatchCounts:
    processed: int = 0
    dead_lettered: int = 0


@dataclass
class _Claimed:
    entry: streams.Entry
    row: DelayedTask
    task: registry.Task[Any, Any] | None
    unknown: TaskNotRegistered | None = None
    #: how late the claim took the task (ms after its run_at)
    late_ms: float = 0.0


class Batch:
    """Handles entries for one thread of a worker.

    :param dead: the dead-letter stream of each ready stream.
    :param release: called with entries finished with (no more heartbeats).
    :param early_wait: how long an entry that arrived a little before its
        task's ``run_at`` (by this machine's clock) is held until then.
    :param watchdog: told what this thread claims and runs, for time limits.
    :param slots: the limits' slots the process holds
        (:mod:`django_delayq.limits.slots`).
    """

    def __init__(
        self,
        client: Client,
        consumer: str,
        *,
        dead: dict[str, str],
        pacer: Pacer,
        release: Callable[[list[streams.Entry]], None],
        early_wait: float,
        watchdog: Watchdog,
        slots: Slots | None = None,
    ) -> None:
        self.client = client
        self.slots = slots or Slots(())
        self.consumer = consumer
        self.dead = dead
        self.pacer = pacer
        self.release = release
        self.early_wait = early_wait
        self.watchdog = watchdog

    def handle(self, pending: list[streams.Entry]) -> BatchCounts:
        counts = BatchCounts()
        try:
            self._handle(pending, counts)
        except Abandoned:
            # The worker gave up on this thread (a task stuck past its time
            # limit) and handed back what it held. The rest stays pending:
            # it is reclaimed after the visibility timeout, and its rows
            # decide.
            self.release(list(pending))
            pending.clear()
        return counts

    def _handle(self, pending: list[streams.Entry], counts: BatchCounts) -> None:
        for entry in [e for e in pending if e.task_id is None]:
            malformed = Outcome(Disposition.DEAD, "not a task id entry")
            self._settle(pending, entry, malformed)
            counts.dead_lettered += 1
        # Under limits: only deliveries that still hold their slots run; the
        # others went back to wait for admission, their entries dropped.
        limited = [e for e in pending if self.slots.limited(e) and e.task_id]
        if limited:
            self._finish(pending, self.slots.confirm(self.client, limited))
        claimed = self._claim(pending)
        self.watchdog.hold(item.row for item in claimed)
        try:
            while claimed:
                rest = self._run_some(pending, claimed, counts)
                still = {id(item) for item in rest}
                self.watchdog.drop(i.row for i in claimed if id(i) not in still)
                claimed = rest
        finally:
            self.watchdog.drop(item.row for item in claimed)
        # Whatever was not claimed in one go, one by one.
        for entry in list(pending):
            assert entry.task_id is not None
            self.watchdog.check_not_abandoned()
            outcome = execute(
                entry.task_id,
                worker=self.consumer,
                stream=entry.stream,
                entry_id=entry.entry_id.decode(),
                early_wait=self.early_wait,
                watchdog=self.watchdog,
            )
            counts.processed += 1
            if self._settle(pending, entry, outcome):
                counts.dead_lettered += 1

    def _claim(self, pending: list[streams.Entry]) -> list[_Claimed]:
        """Claim the due tasks of fresh deliveries, in one statement."""
        fresh = [entry for entry in pending if not entry.reclaimed]
        now = timezone.now()
        rows = transitions.claim_due(
            [(entry.task_id, entry.entry_id.decode()) for entry in fresh],
            now,
            self.consumer,
            write_db(),
        )
        # Two entries may deliver one task: the row names the one it took.
        by_delivery: dict[tuple[Any, str], DelayedTask] = {
            (row.pk, transitions.delivery_of(row.claim_entry)): row for row in rows
        }
        claimed = []
        for entry in fresh:
            row = by_delivery.get((entry.task_id, entry.entry_id.decode()))
            if row is None:
                continue
            # Under limits, since they admitted it (DelayedTask.start_lateness).
            late_ms = row.start_lateness() * 1000
            try:
                task = registry.get(row.name)
            except TaskNotRegistered as exc:
                claimed.append(_Claimed(entry, row, None, exc, late_ms))
            else:
                claimed.append(_Claimed(entry, row, task, late_ms=late_ms))
        return claimed

    def _run_some(
        self,
        pending: list[streams.Entry],
        claimed: list[_Claimed],
        counts: BatchCounts,
    ) -> list[_Claimed]:
        """Run the first claimed task alone, or a group from the front;
        return what is still to run."""
        self.watchdog.check_not_abandoned()
        group = []
        for item in claimed:
            if item.task is None or not self.pacer.groupable(item.row, item.task):
                break
            group.append(item)
        if len(group) < 2:
            first = claimed[0]
            if first.unknown is not None:
                outcome = unknown_task(first.row, first.unknown)
            else:
                outcome = start(first.row, self.watchdog)
                ran_for = self.watchdog.last_duration()
                if group and ran_for is not None:
                    # Groupable, alone for want of neighbours: what its
                    # function took sizes the next claims (see Pacer).
                    self.pacer.note_runs([(first.row.name, ran_for)])
            counts.processed += 1
            ran = first.unknown is None and outcome.disposition is Disposition.DONE
            if self._settle(pending, first.entry, outcome, [first] if ran else []):
                counts.dead_lettered += 1
            return claimed[1:]
        result = run_group(
            [item.row for item in group],
            [item.task for item in group if item.task is not None],
            write_db(),
            self.pacer,
            self.watchdog,
        )
        done = {row.pk for row in result.done}
        fenced = {row.pk for row in result.fenced}
        finished = [item for item in group if item.row.pk in done]
        self._finish(pending, [item.entry for item in finished], finished)
        for item in group:
            if item.row.pk in fenced:
                # Another worker took the attempt over: its entry is theirs.
                self._forget(pending, item.entry)
        counts.processed += len(done) + len(fenced)
        left = {row.pk for row in result.left}
        return [item for item in group if item.row.pk in left] + claimed[len(group) :]

    def _settle(
        self,
        pending: list[streams.Entry],
        entry: streams.Entry,
        outcome: Outcome,
        ran: list[_Claimed] | None = None,
    ) -> bool:
        """Finish with one entry as ``outcome`` says; True if dead-lettered."""
        if outcome.disposition is Disposition.DEAD:
            logger.warning(
                "worker %s: dead-lettered entry %s of %s: %s",
                self.consumer,
                entry.entry_id,
                entry.stream,
                outcome.reason,
            )
            try:
                streams.dead_letter(
                    self.client, self.dead[entry.stream], entry, outcome.reason
                )
                signals.notify(
                    signals.entry_dead_lettered,
                    DelayedTask,
                    stream=entry.stream,
                    reason=outcome.reason,
                )
            finally:
                self._forget(pending, entry)
            return True
        if outcome.disposition is Disposition.LEAVE:
            self._forget(pending, entry)
        else:
            self._finish(pending, [entry], ran)
        return False

    def _finish(
        self,
        pending: list[streams.Entry],
        entries: list[streams.Entry],
        ran: list[_Claimed] | None = None,
    ) -> None:
        """Acknowledge and delete entries whose outcome is committed, and
        count the attempts of ``ran`` (claimed tasks that ran) in the same
        round trip."""
        if not entries:
            return
        tallies: dict[str, activity.Tally] = {}
        for item in ran or []:
            tallies.setdefault(item.entry.stream, activity.Tally()).add(
                succeeded=item.row.status == Status.SUCCEEDED, late_ms=item.late_ms
            )
        # The limits' slots go in the same round trip (the same slot).
        releases = self.slots.release_calls(entries)
        try:
            streams.finish_many(self.client, entries, tallies, also=releases)
        finally:
            # Even if the acknowledgement failed: the entries are then
            # reclaimed later, and their rows (now finished) make that a
            # no-op; and their slots lapse with their leases.
            for entry in entries:
                self._forget(pending, entry)

    def _forget(self, pending: list[streams.Entry], entry: streams.Entry) -> None:
        pending.remove(entry)
        self.release([entry])
        self.slots.release(self.client, [entry])
