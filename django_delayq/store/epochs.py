"""Each shard's index marker: how a loop sees at once that Redis lost data.

``<prefix>:{<queue>:<shard>}:epoch`` is written only by the process that
rebuilds the shard's index from the rows (``lua/epoch.lua``), in the shard's
slot, so a Redis Cluster node that loses its data loses the markers of its
own shards only. Two signals, both already in replies the dispatcher gets
on every move, so that watching costs no round trip:

* the marker is missing (``move.lua`` says so): the shard's keys were
  flushed (``FLUSHALL``, ``FLUSHDB``) or its Redis restarted without
  persistence;
* the move script had to be sent by its source (``NOSCRIPT``): the server
  never ran it since it started, so it restarted (perhaps from an older
  snapshot, which brings an old marker back) or is a replica just promoted
  (a failover: scripts are not replicated, and the last writes may be
  lost). The marker may be there, as old as the data: the rebuild is
  *forced*, unless another process forced it a moment ago.

Either way one process claims the rebuild of each shard (the marker then
says ``repairing``, with a TTL: a claimant that dies lets it go, and the
loss is seen again), rebuilds, and marks it ``rebuilt``.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis
from redis.exceptions import RedisClusterException

from . import scripts
from .errors import translated
from .keys import ShardKeys

#: How long a claim holds the marker without being marked done (ms): past
#: that, the rebuild is taken as failed and the next move sees the loss.
CLAIM_MS = 15_000
#: A forced claim leaves alone a marker written this recently (ms): another
#: process that met the same restart claimed (or rebuilt) it already.
FRESH_MS = 10_000


@translated
def claim(
    client: redis.Redis, keys: ShardKeys, token: str, *, force: bool = False
) -> bool:
    """Claim the rebuild of the shard's index for ``token``; True if the
    caller is to rebuild it: the marker is missing, or (``force``) was
    written before the server restarted."""
    reply = scripts.load("epoch")(
        client,
        (keys.epoch,),
        ("force" if force else "claim", token, CLAIM_MS, FRESH_MS),
    )
    return bool(int(reply))


@translated
def mark_rebuilt(client: redis.Redis, keys: ShardKeys, token: str) -> bool:
    """Mark the shard's index rebuilt, if ``token``'s claim still holds;
    False if Redis lost it meanwhile (lost data again) or another process
    took the rebuild over."""
    reply = scripts.load("epoch")(client, (keys.epoch,), ("done", token, 0, 0))
    return bool(int(reply))


def on_node_of(
    client: redis.Redis, key: str, shards: Sequence[ShardKeys]
) -> list[ShardKeys]:
    """Those of ``shards`` that live where ``key`` does: on a Redis Cluster
    the shards of that key's node (the one that restarted), on one Redis
    all of them."""
    find = getattr(client, "get_node_from_key", None)
    if find is None:
        return list(shards)
    try:
        node = find(key)
        return [keys for keys in shards if find(keys.epoch) == node]
    except (redis.RedisError, RedisClusterException):
        return list(shards)  # the slot map is being re-read: all, to be safe
