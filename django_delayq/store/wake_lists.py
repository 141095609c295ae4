"""Wake lists: how ``schedule()`` wakes the dispatcher that owns a shard.

``add.lua`` pushes to a shard's wake list when a new task is due before
every other one; a dispatcher blocks on the lists of the shards it owns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import redis

from .broken import is_wrong_type, keys_of_type
from .errors import translated


@translated
def wake(client: redis.Redis, key: str) -> None:
    """Wake whoever blocks on the wake list ``key`` (or the next to block)."""
    client.lpush(key, "1")


@translated
def wait(client: redis.Redis, keys: Sequence[str], timeout: float) -> str | None:
    """Block up to ``timeout`` seconds (rounded up to whole seconds, as
    ``BLPOP`` wants) until one of the wake lists ``keys`` is pushed; the
    list that was, or None.

    All ``keys`` must share one hash slot on a Redis Cluster. A key that
    holds another type is left out, as :func:`.streams.read` does.
    """
    try:
        popped = client.blpop(list(keys), timeout=math.ceil(timeout))
    except redis.ResponseError as exc:
        if not is_wrong_type(exc):
            raise
        usable = keys_of_type(client, keys, "list")
        if not usable or len(usable) == len(keys):
            raise
        return wait(client, usable, timeout)
    if not popped:
        return None
    key = popped[0]
    return key.decode() if isinstance(key, bytes) else str(key)
