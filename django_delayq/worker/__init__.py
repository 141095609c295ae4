"""The worker: runs the tasks the dispatchers move into the ready streams.

``loop`` is :class:`Worker`, its threads and its main loop. A thread's work
goes: ``readers`` (reading the streams, highest priority band first, and
reclaiming what stopped workers held) into ``inflight`` (what the process
holds), then ``batch`` (claiming what a thread took), ``group_commit``
(several tasks in one transaction) or ``execution`` (one task alone;
:func:`claim_and_run` is its entry, which the testing toolkit runs a due
row through), both calling a function as ``attempts`` says.
Around them: ``time_limits`` and ``stuck`` (a task that runs too long),
``membership`` (joining the consumer groups; the heartbeat), ``quota``
(``--max-tasks``), and ``board`` (what the process runs, for its
supervisor). How an attempt ended is recorded by
:mod:`django_delayq.outcomes`, which the sweeper and the supervisor use too.
"""

from __future__ import annotations

from .execution import Outcome, claim_and_run
from .loop import DEFAULT_PREFETCH, READ_BLOCK_MS, Worker, WorkerStats

__all__ = [
    "DEFAULT_PREFETCH",
    "READ_BLOCK_MS",
    "Outcome",
    "Worker",
    "WorkerStats",
    "claim_and_run",
]
