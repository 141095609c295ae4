"""Which shards a dispatcher moves: leases shared out between dispatchers;
what a dispatcher counts.

Each shard has one lease key (``SET NX PX`` in ``lease.lua``, renewed by its
owner, fenced by the owner's token inside ``move.lua``), so only one
dispatcher moves a shard's due ids at a time. Dispatchers serving the same
queues count each other through a heartbeat sorted set (``members.lua``)
and each takes a fair share of the shards; a dead dispatcher's shards are
taken over once its leases expire.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..store import leases as store
from ..store.backoff import Backoff
from ..store.connection import Client
from ..store.errors import FAILED, Answers
from ..store.keys import ShardKeys, handover_key

logger = logging.getLogger(__name__)


@dataclass
class DispatchStats:
    """What a dispatcher counts: ids moved and batches by its loop, leases
    taken and lost by its :class:`Leases`."""

    moved: int = 0
    batches: int = 0
    leases_taken: int = 0
    leases_lost: int = 0
    per_shard: dict[str, int] = field(default_factory=dict)


@dataclass
class Shard:
    """One shard as a dispatcher sees it."""

    keys: ShardKeys
    owned: bool = False
    #: consecutive lease checks that found the shard without an owner
    unowned_checks: int = 0
    #: monotonic time at which the shard's earliest task is due; None if the
    #: due-set is empty (or the shard is not owned).
    due_at: float | None = None
    #: moves that failed in a row on a Redis error (its node is down)
    backoff: Backoff = field(init=False)

    def __post_init__(self) -> None:
        self.backoff = Backoff(f"dispatcher: shard {self.label}", logger)

    @property
    def label(self) -> str:
        return f"{self.keys.queue}:{self.keys.shard}"


class Leases:
    """The shard leases of one dispatcher.

    :param token: the dispatcher's unique name, written in the leases it holds.
    :param members_key: the heartbeat set of the dispatchers of these queues.
    :param ttl: seconds a lease lives without renewal.
    """

    def __init__(
        self,
        shards: Sequence[Shard],
        *,
        token: str,
        members_key: str,
        ttl: float,
        stats: DispatchStats,
    ) -> None:
        self.shards = shards
        self.token = token
        self.members_key = members_key
        self.ttl = ttl
        self.stats = stats
        self._checks = 0
        self._alive = 1

    def keep(self, client: Client, *, recount: bool = False) -> bool:
        """Renew owned leases, take free shards up to a fair share, hand back
        extras; True if the set of owned shards changed.

        Runs every half lease TTL, which leaves half a TTL of margin for a
        slow renewal. A shard found without an owner on two checks in a row
        is taken whatever the fair share says: the live count can lag behind
        a dispatcher's death, and an unowned shard is never drained.

        With ``recount`` (another dispatcher just handed its shards back)
        the live dispatchers are counted first, so that the shards it left
        are shared out among those still alive at once.

        A lease whose Redis fails is left as it is, so that on a Redis
        Cluster the shards of the nodes that answer keep their leases while
        one node fails over (a lease that expires meanwhile is fenced in
        ``move.lua``). Only when nothing answered is the error raised.
        """
        calls = Answers()
        ttl_ms = int(self.ttl * 1000)
        self._checks += 1
        if self._checks % 2 == 1 or recount:
            # The membership heartbeat goes every other check (it lives for
            # four): it only balances shards, so it may lag a little, and an
            # idle dispatcher spends fewer Redis commands. When it fails,
            # the last count stands.
            alive = calls.call(
                store.beat,
                client,
                self.members_key,
                self.token,
                2 * ttl_ms,
                prune=self._checks % 10 == 1,
            )
            if alive is not FAILED:
                self._alive = int(alive)
        fair = math.ceil(len(self.shards) / max(self._alive, 1))
        changed = self._renew(client, ttl_ms, calls)
        owned = sum(s.owned for s in self.shards)
        taken_now = set()
        for shard in self.shards:
            if shard.owned:
                continue
            if owned >= fair:
                lease = calls.call(store.is_held, client, shard.keys.lease)
                if lease is FAILED:
                    continue
                shard.unowned_checks = shard.unowned_checks + 1 if not lease else 0
                if shard.unowned_checks < 2:
                    continue
            if (
                calls.call(store.take, client, shard.keys.lease, self.token, ttl_ms)
                is True
            ):
                shard.unowned_checks = 0
                shard.owned = True
                taken_now.add(shard.label)
                shard.due_at = time.monotonic()  # drain it now
                owned += 1
                changed = True
                self.stats.leases_taken += 1
                logger.info("dispatcher %s took shard %s", self.token, shard.label)
        for shard in reversed(self.shards):
            if owned <= fair:
                break
            if taken_now:
                # Shards were orphaned: the live count may still include a
                # dead dispatcher. Balance again once things settle.
                break
            if shard.owned and owned > fair:
                released = calls.call(
                    store.release, client, shard.keys.lease, self.token
                )
                if released is FAILED:
                    continue
                shard.owned = False
                shard.due_at = None
                owned -= 1
                changed = True
                logger.info("dispatcher %s handed back %s", self.token, shard.label)
        calls.raise_if_none_answered()
        return changed

    def _renew(self, client: Client, ttl_ms: int, calls: Answers) -> bool:
        """Renew every owned lease in one round trip (one per lease if that
        failed); True if one was lost."""
        owned = [s for s in self.shards if s.owned]
        if not owned:
            return False
        keys = [s.keys.lease for s in owned]
        renewed: list[Any] = calls.call(
            store.renew_all, client, keys, self.token, ttl_ms
        )
        if renewed is FAILED:
            # A node is down (a cluster failing over): renew lease by lease,
            # so the shards of the nodes that answer keep theirs.
            renewed = [
                calls.call(store.take, client, key, self.token, ttl_ms) for key in keys
            ]
        lost = False
        for shard, outcome in zip(owned, renewed, strict=True):
            if outcome is False:
                self.lose(shard)
                lost = True
        return lost

    def lose(self, shard: Shard) -> None:
        """Another dispatcher holds ``shard`` now."""
        shard.owned = False
        shard.due_at = None
        self.stats.leases_lost += 1
        logger.warning("dispatcher %s lost the lease of %s", self.token, shard.label)

    def release_all(self, client: Client, *, hand_over: bool = True) -> None:
        """Hand every lease back, leave the membership set and, with
        ``hand_over``, wake the dispatchers blocked on the handover list (a
        graceful stop: they take the shards over at once, not when their
        next lease check comes).

        Also with no lease to hand back: the push for this dispatcher's own
        listener ends its blocked read, which would otherwise linger, and
        could take a push meant for a live dispatcher.
        """
        for shard in self.shards:
            if shard.owned:
                store.release(client, shard.keys.lease, self.token)
                shard.owned = False
        if hand_over:
            handover = handover_key(self.members_key)
            store.hand_over(client, self.members_key, self.token, handover)
        else:
            store.leave(client, self.members_key, self.token)
