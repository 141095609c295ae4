"""Redis key names and the member encoding.

Layout, per queue and shard (``{queue:shard}`` is a Redis Cluster hash tag, so
every key of one shard lives in one slot and each Lua script touches one slot)::

    <prefix>:{<queue>:<shard>}:due    ZSET    member: task id, score: run_at (ms)
    <prefix>:{<queue>:<shard>}:ready  STREAM  ids moved from due by the dispatcher
    <prefix>:{<queue>:<shard>}:wake   LIST    one element: "a new head arrived"
    <prefix>:{<queue>:<shard>}:lease  STRING  token of the dispatcher owning the shard
    <prefix>:{<queue>:<shard>}:dead   STREAM  entries no worker could run, with why
    <prefix>:{<queue>:<shard>}:activity:<minute>  HASH  counters (store.activity)

and, per prefix, ``<prefix>:owner`` (see :mod:`django_delayq.ownership`) and
``<prefix>:workers`` (:func:`workers_key`).

A member is the task id's 16 raw bytes: the smallest unique encoding, which
keeps Redis memory per scheduled task low.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class ShardKeys:
    queue: str
    shard: int
    due: str
    ready: str
    wake: str
    lease: str
    dead: str


def shard_keys(prefix: str, queue: str, shard: int) -> ShardKeys:
    base = f"{prefix}:{{{queue}:{shard}}}"
    return ShardKeys(
        queue,
        shard,
        due=f"{base}:due",
        ready=f"{base}:ready",
        wake=f"{base}:wake",
        lease=f"{base}:lease",
        dead=f"{base}:dead",
    )


def sweeper_lock_key(prefix: str) -> str:
    """The lock one sweep pass holds, so concurrent sweepers take turns."""
    return f"{prefix}:sweeper"


def workers_key(prefix: str) -> str:
    """The ZSET of live worker processes: member = worker name, score = the
    expiry of its heartbeat (epoch ms). What the dashboard and status read
    for liveness: Redis' own idle time of a consumer grows while it blocks
    waiting for work, so it cannot tell an idle worker from a dead one."""
    return f"{prefix}:workers"


def dispatchers_key(prefix: str, queues: list[str]) -> str:
    """The ZSET of live dispatchers serving exactly these queues.

    Dispatchers balance shards only with peers serving the same queues, so
    dispatchers started with different ``--queue`` sets never hand each
    other's shards back and forth.
    """
    return f"{prefix}:dispatchers:{','.join(sorted(queues))}"


def encode_member(task_id: uuid.UUID) -> bytes:
    return task_id.bytes


def decode_member(member: bytes) -> uuid.UUID:
    """Return the task id of a member; ``ValueError`` if it is not one."""
    if len(member) != 16:
        raise ValueError(f"not a task id: {member!r}")
    return uuid.UUID(bytes=bytes(member))
