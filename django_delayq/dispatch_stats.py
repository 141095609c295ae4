"""What a dispatcher counts: kept apart so that the loop
(:mod:`django_delayq.dispatcher`) and its lease keeper
(:mod:`django_delayq.leases`) both write to it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DispatchStats:
    moved: int = 0
    batches: int = 0
    leases_taken: int = 0
    leases_lost: int = 0
    per_shard: dict[str, int] = field(default_factory=dict)
