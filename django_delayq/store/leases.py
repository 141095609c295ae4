"""Leases: a key one holder owns for a while, renewed by its token.

The dispatchers hold one lease per shard (only the holder moves the shard's
due ids, fenced again inside ``move.lua``) and count each other in a
heartbeat sorted set; the sweepers share one lease so that one sweeps at a
time. Every call touches one key, so one slot of a Redis Cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis

from . import scripts
from .errors import translated

logger = logging.getLogger(__name__)


#: lease.lua's reply when it replaced a key no lease holder could have
#: written (another type, or no TTL), which would otherwise block for ever.
_REPAIRED = 3


@translated
def take(client: redis.Redis, key: str, token: str, ttl_ms: int) -> bool:
    """Take the lease if it is free, or renew it if ``token`` holds it; True
    if ``token`` holds it now, for ``ttl_ms``."""
    reply = int(scripts.load("lease")(client, (key,), (token, ttl_ms)))
    return _held(key, reply)


@translated
def renew_all(
    client: redis.Redis, keys: Sequence[str], token: str, ttl_ms: int
) -> list[bool]:
    """:func:`take` for many leases in one round trip; whether each is held."""
    script = scripts.load("lease")
    replies = scripts.run_many(
        client, [(script, (key,), (token, ttl_ms)) for key in keys]
    )
    return [_held(key, int(reply)) for key, reply in zip(keys, replies, strict=True)]


def _held(key: str, reply: int) -> bool:
    if reply == _REPAIRED:
        logger.error(
            "lease %s was not a lease (a value of another type, or one without "
            "a TTL, written by hand?) and would never have expired; replaced",
            key,
        )
    return reply != 0


@translated
def is_held(client: redis.Redis, key: str) -> bool:
    """Whether anybody holds the lease."""
    return bool(client.exists(key))


@translated
def release(client: redis.Redis, key: str, token: str) -> None:
    """Hand the lease back, if ``token`` still holds it (compare and delete,
    atomically: an expired lease someone else took stays theirs)."""
    scripts.load("release")(client, (key,), (token,))


@translated
def beat(
    client: redis.Redis, members_key: str, token: str, ttl_ms: int, *, prune: bool
) -> int:
    """Say that ``token`` is alive for ``ttl_ms`` more in the heartbeat set;
    how many members are alive. ``prune`` also drops the expired ones."""
    return int(
        scripts.load("members")(
            client, (members_key,), (token, ttl_ms, "1" if prune else "0")
        )
    )


@translated
def leave(client: redis.Redis, members_key: str, token: str) -> None:
    """Leave the heartbeat set at once (a graceful stop)."""
    client.zrem(members_key, token)


@translated
def hand_over(client: redis.Redis, members_key: str, token: str, handover: str) -> int:
    """:func:`leave`, then wake every other dispatcher blocked on the
    ``handover`` list; how many pushes that took.

    One push per member left, plus one for the caller's own listener, which
    may still be blocked on the list (``BLPOP`` serves the longest-blocked
    client first). Expired members still in the set count too: a push
    nobody takes expires with the list, and a dispatcher that blocks later
    takes it and looks at the leases once more, which costs nothing. Two
    round trips, each on one key (one slot of a Redis Cluster): a stop is
    rare.
    """
    pipe = client.pipeline(transaction=False)
    pipe.zrem(members_key, token)
    pipe.zcard(members_key)
    _, others = pipe.execute()
    pushes = min(int(others) + 1, HANDOVER_KEPT)
    pipe = client.pipeline(transaction=False)
    pipe.lpush(handover, *["1"] * pushes)
    pipe.ltrim(handover, 0, HANDOVER_KEPT - 1)
    pipe.pexpire(handover, HANDOVER_TTL_MS)
    pipe.execute()
    return pushes


#: Pushes a handover list keeps at most, and how long it lives unread.
HANDOVER_KEPT = 64
HANDOVER_TTL_MS = 60_000
