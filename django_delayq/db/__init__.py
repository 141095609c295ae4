"""Everything that knows which database it talks to: hand-written SQL for
the hot statements, bulk inserts, savepoints made only when needed, and
keeping a long loop's connections healthy.

The rest of the package goes through the ORM, or through these.
"""

from __future__ import annotations

from .connections import recycle_connections
from .inserts import insert_rows, new_row
from .savepoints import TaskSavepoints

__all__ = ["TaskSavepoints", "insert_rows", "new_row", "recycle_connections"]
