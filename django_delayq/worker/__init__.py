"""The worker: runs the tasks the dispatchers move into the ready streams.

``loop`` is :class:`Worker`, its threads and its main loop. A thread's work
goes: ``readers`` (reading the streams, highest priority band first, and
reclaiming what stopped workers held) into ``inflight`` (what the process
holds), then ``batch`` (claiming what a thread took), ``group_commit``
(several tasks in one transaction) or ``execution`` (one task alone).
Around them: ``time_limits`` and ``stuck`` (a task that runs too long),
``membership`` (joining the consumer groups; the heartbeat), ``quota``
(``--max-tasks``), and ``board`` (what the process runs, for its
supervisor). How an attempt ended is recorded by
:mod:`django_delayq.outcomes`, which the sweeper and the supervisor use too.
"""

from __future__ import annotations

from .loop import DEFAULT_PREFETCH, READ_BLOCK_MS, Worker, WorkerStats

__all__ = ["DEFAULT_PREFETCH", "READ_BLOCK_MS", "Worker", "WorkerStats"]
