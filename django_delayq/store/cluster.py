"""The Redis Cluster client: redis-py's, with every failure a ``RedisError``.

redis-py's cluster client follows ``MOVED`` and ``ASK`` redirects (a slot
migrating, or a replica promoted after a failover) and re-reads the slot map
from the nodes it knows when a node stops answering. A few of its failures,
though, are not ``redis.RedisError``: it raises ``RedisClusterException``
when no node it knows answers (also from its constructor, which connects at
once) and ``SlotNotCoveredError`` while a slot has no node. This client
raises those as :class:`ClusterUnavailable`, a ``redis.ConnectionError``, so
that the store's functions turn them into ``RedisUnavailable`` (see
:mod:`.errors`) with ``unreachable`` set: a cluster half-way through a
failover is simply "Redis unavailable" for a moment, like a single Redis
restarting.

Every key of one shard shares a hash tag (see :mod:`.keys`), so each script
and each transaction touches one slot; commands over many shards go through
non-transactional pipelines, which the client splits by node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import redis
from redis.cluster import ClusterPipeline, RedisCluster
from redis.exceptions import RedisClusterException


class ClusterUnavailable(redis.ConnectionError):
    """No node of the Redis Cluster serves the command's slot right now."""


@contextlib.contextmanager
def _as_redis_errors() -> Iterator[None]:
    try:
        yield
    except RedisClusterException as exc:
        raise ClusterUnavailable(f"Redis Cluster: {exc}") from exc


class _Pipeline(ClusterPipeline):
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        with _as_redis_errors():
            return super().execute(raise_on_error)


class _Cluster(RedisCluster):
    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        with _as_redis_errors():
            return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        pipe.__class__ = _Pipeline
        return pipe


def connect(url: str, options: dict[str, Any]) -> redis.Redis:
    """A cluster client reached through the node ``url`` names.

    ``options`` are a role's connection options (see
    :mod:`.connection`); its ``retry`` also bounds the client's own retries
    after a node failed, so the loops' back-off stays the only one.
    """
    with _as_redis_errors():
        client = _Cluster.from_url(url, **options)
    # Typed as a single Redis: the commands this package sends are the same.
    return client  # type: ignore[return-value]
