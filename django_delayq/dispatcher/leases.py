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
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..store import leases as store
from ..store.backoff import Backoff
from ..store.connection import Client
from ..store.errors import FAILED, Answers
from ..store.keys import ShardKeys, handover_key, shard_label

logger = logging.getLogger(__name__)


@dataclass
class DispatchStats:
    """What a dispatcher counts: ids moved and batches, leases taken and
    lost (from the :class:`Decision` of each lease check)."""

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
        return shard_label(self.keys.queue, self.keys.shard)


@dataclass(frozen=True)
class Decision:
    """What one lease check decided: the shards (by label) a dispatcher
    keeps, takes, hands back and lost, out of its fair share of ``fair``
    shards with ``alive`` dispatchers counted.

    :class:`Leases` returns it; the dispatcher's loop counts it in its
    :class:`DispatchStats`.
    """

    fair: int
    alive: int
    kept: tuple[str, ...] = ()
    taken: tuple[str, ...] = ()
    released: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    #: taken beyond the fair share: found without an owner twice in a row
    orphans: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the set of owned shards changed."""
        return bool(self.taken or self.released or self.lost)

    @property
    def reason(self) -> str:
        share = f"a fair share of {self.fair} ({self.alive} dispatcher(s) alive)"
        if self.orphans:
            return f"took shards no one held twice in a row, beyond {share}"
        if self.released:
            return f"handed back shards beyond {share}"
        if self.taken:
            return f"took free shards up to {share}"
        if self.lost:
            return "another dispatcher took over shards it held"
        return f"kept what it holds, with {share}"


class LeaseAnswers(Protocol):
    """What the fair-share policy asks about other shards' leases, each
    answer ``None`` when its Redis failed (the shard is then left as it is).
    """

    def take(self, label: str) -> bool | None:
        """Take the shard's lease if no one holds it; True if taken."""

    def is_free(self, label: str) -> bool | None:
        """Whether no one holds the shard's lease."""

    def release(self, label: str) -> bool | None:
        """Hand the lease back; True if done."""


def fair_share(shards: int, alive: int) -> int:
    """The most shards one of ``alive`` dispatchers takes of ``shards``."""
    return math.ceil(shards / max(alive, 1))


def share_out(
    labels: Sequence[str],
    *,
    alive: int,
    held: Collection[str],
    answers: LeaseAnswers,
    unowned_checks: dict[str, int],
    lost: Sequence[str] = (),
) -> Decision:
    """Decide which of ``labels`` (a dispatcher's shards, in order) it takes
    and hands back, holding ``held`` with ``alive`` dispatchers counted.

    Free shards are taken, in order, up to the fair share. Beyond it, a
    shard found without an owner on two checks in a row
    (``unowned_checks``, updated here) is taken whatever the fair share
    says: the live count can lag behind a dispatcher's death, and an
    unowned shard is never drained. Extras are handed back, last first,
    unless such a shard was just taken: the live count may still include
    the dead dispatcher, so balancing waits until things settle.

    The other shards' leases are asked through ``answers``, one call each
    and only as the policy needs them (up to the fair share, the take is
    the look; beyond it, one read a shard), so a dispatcher spends no
    command it did not need, and the policy is tested without Redis.
    """
    fair = fair_share(len(labels), alive)
    owned = [label for label in labels if label in held]
    taken: list[str] = []
    orphans: list[str] = []
    for label in labels:
        if label in held:
            continue
        beyond = len(owned) >= fair
        if beyond:
            free = answers.is_free(label)
            if free is None:
                continue
            unowned_checks[label] = unowned_checks.get(label, 0) + 1 if free else 0
            if unowned_checks[label] < 2:
                continue
        if answers.take(label) is True:
            unowned_checks[label] = 0
            owned.append(label)
            taken.append(label)
            if beyond:
                orphans.append(label)
    released: list[str] = []
    if not taken:
        for label in reversed(labels):
            if len(owned) <= fair:
                break
            if label in owned and answers.release(label):
                owned.remove(label)
                released.append(label)
    return Decision(
        fair=fair,
        alive=alive,
        kept=tuple(label for label in owned if label not in taken),
        taken=tuple(taken),
        released=tuple(released),
        lost=tuple(lost),
        orphans=tuple(orphans),
    )


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
    ) -> None:
        self.shards = shards
        self.token = token
        self.members_key = members_key
        self.ttl = ttl
        self._checks = 0
        self._alive = 1

    def keep(self, client: Client, *, recount: bool = False) -> Decision:
        """Renew owned leases, take free shards up to a fair share, hand back
        extras (see :func:`share_out`); return what was decided.

        Runs every half lease TTL, which leaves half a TTL of margin for a
        slow renewal.

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
        lost = self._renew(client, ttl_ms, calls)
        by_label = {shard.label: shard for shard in self.shards}
        unowned_checks = {s.label: s.unowned_checks for s in self.shards}
        decision = share_out(
            list(by_label),
            alive=self._alive,
            held=[s.label for s in self.shards if s.owned],
            answers=_RedisAnswers(self, client, calls, ttl_ms),
            unowned_checks=unowned_checks,
            lost=lost,
        )
        for label, count in unowned_checks.items():
            by_label[label].unowned_checks = count
        for label in decision.taken:
            shard = by_label[label]
            shard.owned = True
            shard.due_at = time.monotonic()  # drain it now
            logger.info("dispatcher %s took shard %s", self.token, label)
        for label in decision.released:
            shard = by_label[label]
            shard.owned = False
            shard.due_at = None
            logger.info("dispatcher %s handed back %s", self.token, label)
        calls.raise_if_none_answered()
        return decision

    def _renew(self, client: Client, ttl_ms: int, calls: Answers) -> list[str]:
        """Renew every owned lease in one round trip (one per lease if that
        failed); the shards whose lease another dispatcher holds now."""
        owned = [s for s in self.shards if s.owned]
        if not owned:
            return []
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
        lost = []
        for shard, outcome in zip(owned, renewed, strict=True):
            if outcome is False:
                self.lose(shard)
                lost.append(shard.label)
        return lost

    def lose(self, shard: Shard) -> None:
        """Another dispatcher holds ``shard`` now (the caller counts it)."""
        shard.owned = False
        shard.due_at = None
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


class _RedisAnswers:
    """:class:`LeaseAnswers` from the shards' lease keys, through ``calls``
    (which records whether any Redis answered)."""

    def __init__(
        self, leases: Leases, client: Client, calls: Answers, ttl_ms: int
    ) -> None:
        self._keys = {shard.label: shard.keys.lease for shard in leases.shards}
        self._token = leases.token
        self._client = client
        self._calls = calls
        self._ttl_ms = ttl_ms

    def take(self, label: str) -> bool | None:
        taken = self._calls.call(
            store.take, self._client, self._keys[label], self._token, self._ttl_ms
        )
        return None if taken is FAILED else taken is True

    def is_free(self, label: str) -> bool | None:
        held = self._calls.call(store.is_held, self._client, self._keys[label])
        return None if held is FAILED else not held

    def release(self, label: str) -> bool | None:
        released = self._calls.call(
            store.release, self._client, self._keys[label], self._token
        )
        return None if released is FAILED else True
