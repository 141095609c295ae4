"""The dispatcher: moves due task ids from the due-sets to the ready streams.

``loop`` is :class:`Dispatcher`, one per ``delayq_dispatch`` process;
``leases`` shares the shards out between dispatchers (and holds what a
dispatcher counts); ``wakeups`` wakes a sleeping dispatcher when a new task
is due sooner, or when another dispatcher hands its shards over.
"""

from __future__ import annotations

from .leases import DispatchStats
from .loop import Dispatcher

__all__ = ["DispatchStats", "Dispatcher"]
