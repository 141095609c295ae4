"""Periodic schedules: ``@periodic`` and ``DELAYQ["PERIODIC"]``.

* :mod:`.ticks`: when a schedule ticks, and each tick's dedupe key;
* :mod:`.declared`: the decorator, the setting, and the list of both;
* :mod:`.planner`: writes the next ticks as task rows, exactly once;
* :mod:`.keeper`: the thread in each dispatcher and sweeper that plans.

Only the first two are imported here: a tasks module imports ``periodic``
while apps load, before the models can be.
"""

from __future__ import annotations

from .declared import PeriodicTask, declared, periodic
from .ticks import CATCH_UP_POLICIES, MAX_CATCH_UP, Schedule

__all__ = [
    "CATCH_UP_POLICIES",
    "MAX_CATCH_UP",
    "PeriodicTask",
    "Schedule",
    "declared",
    "periodic",
]
