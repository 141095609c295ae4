"""The sweeper: keeps Redis in step with the rows, whatever happened.

One pass, in order:

1. replay the outbox (Redis writes that failed after a commit), and make
   the paused queues' mirror say what their rows say (a pause whose Redis
   write failed, a mirror Redis lost: :mod:`django_delayq.queues`);
2. reconcile a moving window: every ``scheduled`` row due before now +
   ``RECONCILE_HORIZON`` (overdue ones included) that is in neither its
   due-set nor its ready stream is indexed again: this repairs a process
   killed between commit and the Redis write, and any Redis data loss;
3. remove due-set members inside that window whose row is finished,
   cancelled or gone, and correct members whose score disagrees with the row;
4. recover stuck work: a ``running`` row that is in no ready stream (its
   worker and its entry are gone) after ``VISIBILITY_TIMEOUT`` is scheduled
   again, or failed when it has no attempts left;
5. prune finished rows past their retention.

Reads go rows first, then the due-set, then the stream: a task moving from
due-set to stream meanwhile is seen in the due-set, never in neither. A row
that looks lost or mis-scored is read again after Redis, and repaired only
if it has not changed meanwhile: a task that ran to its end (or was retried
or rescheduled) between the reads was never lost. Lost tasks go back oldest
first, so after a Redis data loss the most overdue run first. Every repair
is idempotent and fenced on the row's state, and a pass holds a Redis lock,
so several sweepers can run at once. The cost of a pass grows with the
window and the backlog, not with the whole table. A pass logs one line of
counts; the tasks it repaired are named at DEBUG level.

Each pass that ends (done, or skipped because another sweeper held the lock)
says so in ``<prefix>:sweepers`` with one command, valid for
:func:`pass_ttl` of the interval: ``delayq_status`` reads it to tell a
deployment whose sweeper runs from one without any.
"""

from __future__ import annotations

from .loop import (
    BATCH,
    COUNTS,
    DEFAULT_INTERVAL,
    LOCK_MS,
    MISSED_PASSES,
    Sweeper,
    SweepResult,
    pass_ttl,
)

__all__ = [
    "BATCH",
    "COUNTS",
    "DEFAULT_INTERVAL",
    "LOCK_MS",
    "MISSED_PASSES",
    "SweepResult",
    "Sweeper",
    "pass_ttl",
]
