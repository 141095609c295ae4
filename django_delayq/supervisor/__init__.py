"""``delayq_worker --processes N``: a supervisor and its worker processes.

``parent`` is :class:`Supervisor`: it starts the children, watches them,
replaces one that dies or is recycled, and stops them all. ``child`` is one
worker process's life under it (recycling, its last words); ``rescue`` hands
back what a dead child held, and charges the task that killed it;
``companion`` keeps the metrics process beside the children running.
"""

from __future__ import annotations

from .child import Recycling
from .parent import Supervisor

__all__ = ["Recycling", "Supervisor"]
