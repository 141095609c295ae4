"""Reconciling shards' Redis index with the rows, for whichever loop needs
it: the sweeper's passes (:mod:`django_delayq.sweeper`) and a dispatcher
that noticed Redis lost data (:mod:`.rebuild`). The repairs of one shard
are in :mod:`.shard`; the loops that call them know nothing of each other.
"""

from __future__ import annotations

from .rebuild import rebuild
from .shard import Repairs, ShardRows, Window, repair_shard

__all__ = ["Repairs", "ShardRows", "Window", "rebuild", "repair_shard"]
