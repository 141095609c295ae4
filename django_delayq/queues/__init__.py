"""Pausing and resuming queues.

A paused queue's tasks stay ``scheduled`` and fall due as usual: the
dispatcher moves them to the queue's ready streams, where they wait, and no
worker reads those streams or claims what it had read from them until the
queue is resumed; then they run in the order they fell due. Tasks already
running when the pause came finish.

The :class:`~django_delayq.models.PausedQueue` rows are the truth;
``<prefix>:paused`` in Redis mirrors them (:mod:`django_delayq.store.pauses`)
for the workers, which look at it at most twice a second
(:class:`~django_delayq.queues.watch.PauseWatch`). A mirror Redis lost is
*unknown*, not empty: a worker then reads the rows and writes the mirror
again itself, so a ``FLUSHALL`` resumes no queue; the sweeper compares the
mirror with the rows at every pass and repairs it (a pause whose Redis
write failed, writes that landed out of order).
"""

from __future__ import annotations

from .pausing import mirror, pause_queue, paused_queues, resume_queue
from .watch import PauseWatch

__all__ = ["PauseWatch", "mirror", "pause_queue", "paused_queues", "resume_queue"]
