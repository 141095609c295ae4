"""What one sweep pass did: :class:`SweepResult`, logged after each pass."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, fields


@dataclass
class SweepResult:
    replayed: int = 0
    reindexed: int = 0
    removed: int = 0
    corrected: int = 0
    recovered: int = 0
    failed: int = 0
    pruned: int = 0
    #: keys of a shard that held another type (set by hand?), deleted
    replaced: int = 0
    #: shards left for a later pass because their Redis did not answer (a
    #: Redis Cluster node failing over; on one Redis the pass fails instead)
    unreachable: int = 0
    skipped: bool = False  # another sweeper held the lock
    #: when the most overdue of the reindexed tasks was due
    oldest_lost: datetime.datetime | None = None

    def __str__(self) -> str:
        if self.skipped:
            return "skipped: another sweeper is running a pass"
        text = ", ".join(
            f"{f.name} {getattr(self, f.name)}"
            for f in fields(self)
            if f.type in (int, "int")
        )
        if self.oldest_lost is not None:
            due = self.oldest_lost.isoformat(sep=" ", timespec="milliseconds")
            text += f" (the oldest reindexed task was due at {due})"
        return text

    @property
    def repaired(self) -> int:
        return (
            self.reindexed
            + self.removed
            + self.corrected
            + self.recovered
            + self.replaced
        )
