"""Reading the live state of a deployment from Redis: its shards and its
processes, for ``delayq_status``, the metrics collector and the admin
dashboard alike.

Read only, and one round trip: :func:`snapshot` sends every command for
every shard, and for the processes' heartbeats, in a single pipeline, so a
status probe, a scrape or a dashboard request waits for Redis at most once
(one ``REDIS_TIMEOUT`` when Redis hangs), whatever the number of shards. Per
shard it reads::

    ZCARD due / ZRANGE due 0 0 WITHSCORES   how many tasks wait, the earliest,
                                            for each band's due-set
    XLEN ready / XINFO GROUPS ready         the stream backlog and its group,
    XINFO CONSUMERS ready workers           and the worker threads reading it,
                                            for each band's ready stream
    XLEN dead                               dead letters kept
    GET lease / PTTL lease                  the dispatcher moving the shard

and once, Redis' clock and the heartbeats of the workers and of the
sweepers' passes (``TIME``, ``ZRANGEBYSCORE`` of ``<prefix>:workers`` and
``<prefix>:sweepers``).

Keys that do not exist yet (a shard nobody used) read as empty. Connection
errors and timeouts propagate: the caller decides how to degrade.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import redis

from ..conf import QueueSettings
from .errors import translated
from .keys import (
    LIMITS_SHARD,
    ShardKeys,
    shard_keys,
    shard_label,
    sweepers_key,
    workers_key,
)
from .streams import GROUP

#: Commands :func:`snapshot` queues per band's due-set, per band stream,
#: and per shard.
_PER_DUE = 2
_PER_STREAM = 3
_DUE_END = 3 * _PER_DUE
_PER_SHARD = _DUE_END + 3 * _PER_STREAM + 3


@dataclass(frozen=True)
class Consumer:
    """One consumer (a worker thread) of a shard's ready stream group."""

    name: str
    pending: int  # entries delivered to it and not yet acknowledged
    idle_ms: int  # since its last read or heartbeat


@dataclass(frozen=True)
class ShardState:
    queue: str
    shard: int
    due: int  # members of the due-sets (every band)
    head_score: int | None  # the earliest member's due time (epoch ms)
    ready: int  # entries in the ready streams (every band)
    pending: int  # delivered to a worker, not acknowledged yet
    waiting: int  # not delivered to any worker yet
    dead: int  # dead letters kept
    lease_holder: str | None  # the token of the dispatcher owning the shard
    lease_ttl_ms: int | None
    consumers: list[Consumer] = field(default_factory=list)
    #: replies that were errors other than "no such key" (e.g. an ACL denial)
    problems: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return shard_label(self.queue, self.shard)


class Snapshot(NamedTuple):
    """A deployment's live state, as Redis has it."""

    shards: list[ShardState]
    live: Live


@translated
def snapshot(
    client: redis.Redis,
    prefix: str,
    queues: Iterable[QueueSettings],
    limited: Collection[str] = (),
) -> Snapshot:
    """Read the state of every shard of ``queues`` (and the limits shards
    of those ``limited``), and the live processes, in one round trip."""
    shards = [
        shard_keys(prefix, queue.name, number)
        for queue in queues
        for number in [
            *range(queue.shards),
            *([LIMITS_SHARD] if queue.name in limited else []),
        ]
    ]
    pipe = client.pipeline(transaction=False)
    for keys in shards:
        for due_set in keys.due_bands:
            pipe.zcard(due_set)
            pipe.zrange(due_set, 0, 0, withscores=True)
        for stream in keys.ready_bands:
            pipe.xlen(stream)
            pipe.xinfo_groups(stream)
            pipe.xinfo_consumers(stream, GROUP)
        pipe.xlen(keys.dead)
        pipe.get(keys.lease)
        pipe.pttl(keys.lease)
    pipe.time()
    pipe.zrangebyscore(workers_key(prefix), "-inf", "+inf", withscores=True)
    pipe.zrangebyscore(sweepers_key(prefix), "-inf", "+inf", withscores=True)
    # Per-command errors come back as values (a stream without its group
    # answers NOGROUP); connection errors and timeouts still raise.
    replies: list[Any] = pipe.execute(raise_on_error=False)
    processes = replies[len(shards) * _PER_SHARD :]
    for reply in processes:
        if isinstance(reply, Exception):
            raise reply  # a heartbeat set of the wrong type, an ACL denial
    states = [
        _shard_state(keys, _Replies(replies[at : at + _PER_SHARD]))
        for keys, at in zip(
            shards, range(0, len(shards) * _PER_SHARD, _PER_SHARD), strict=True
        )
    ]
    return Snapshot(states, _live(*processes))


#: A sweeper's pass shows it alive for this many of its intervals (the
#: sweeper writes ``<prefix>:sweepers`` with that expiry, ``delayq_status``
#: reads it)...
MISSED_PASSES = 3
#: ...and at least this long (seconds): a pass itself takes a moment.
MIN_PASS_TTL = 10.0


def pass_ttl(interval: float) -> float:
    """How long (seconds) a pass of a sweeper running every ``interval``
    seconds shows it as alive: past that, no pass ended in a few intervals."""
    return max(MISSED_PASSES * interval, MIN_PASS_TTL)


def _shard_state(keys: ShardKeys, reply: _Replies) -> ShardState:
    due = 0
    heads = []
    for band in range(3):
        due += reply.integer(band * _PER_DUE)
        heads += [int(score) for _, score in reply.value(band * _PER_DUE + 1) or []]
    ready = pending = waiting = 0
    consumers: dict[str, Consumer] = {}
    for band in range(3):
        at = _DUE_END + band * _PER_STREAM
        band_ready, band_pending, band_waiting = _stream_backlog(reply, at)
        ready += band_ready
        pending += band_pending
        waiting += band_waiting
        for c in reply.value(at + 2) or []:
            name = _text(c.get("name"))
            seen = consumers.get(name)
            idle = int(c.get("idle") or 0)
            consumers[name] = Consumer(
                name,
                int(c.get("pending") or 0) + (seen.pending if seen else 0),
                min(idle, seen.idle_ms) if seen else idle,
            )
    end = _DUE_END + 3 * _PER_STREAM
    ttl = reply.integer(end + 2)
    return ShardState(
        queue=keys.queue,
        shard=keys.shard,
        due=due,
        head_score=min(heads, default=None),
        ready=ready,
        pending=pending,
        waiting=waiting,
        dead=reply.integer(end),
        lease_holder=_text(reply.value(end + 1)) or None,
        lease_ttl_ms=ttl if ttl >= 0 else None,
        consumers=list(consumers.values()),
        problems=reply.problems,
    )


def _stream_backlog(reply: _Replies, at: int) -> tuple[int, int, int]:
    """One ready stream's entries, pending and waiting ones, from its
    ``XLEN`` and ``XINFO GROUPS`` replies at ``at``."""
    ready = reply.integer(at)
    group = next(
        (g for g in reply.value(at + 1) or [] if _text(g.get("name")) == GROUP), None
    )
    pending = int(group.get("pending") or 0) if group else 0
    lag = group.get("lag") if group else None
    # Redis cannot always tell the lag (entries were deleted after the
    # last delivery, which the workers do to every finished entry); the
    # entries left in the stream are then exactly the pending ones plus
    # those not delivered yet.
    waiting = int(lag) if lag is not None else max(ready - pending, 0)
    return ready, pending, waiting


@dataclass(frozen=True)
class Sweeper:
    """A sweeper whose last pass has not lapsed."""

    token: str
    interval: float  # seconds between its passes
    expires_ms: int  # when its last pass stops counting (epoch ms)


@dataclass(frozen=True)
class Live:
    """The processes whose heartbeats have not lapsed, by Redis' clock."""

    now_ms: int
    workers: dict[str, list[str]]  # name -> the queues it serves
    sweepers: list[Sweeper]


def _live(time: Any, workers: Any, sweepers: Any) -> Live:
    seconds, micros = time
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    alive = {}
    for member, expiry in workers:
        if expiry > now_ms:
            name, _, queues = _text(member).partition("#")
            alive[name] = [queue for queue in queues.split(",") if queue]
    passed = []
    for member, expiry in sweepers:
        token, _, interval = _text(member).rpartition("#")
        try:
            seconds_between = float(interval)
        except ValueError:
            continue  # not written by a sweeper
        if expiry > now_ms:
            passed.append(Sweeper(token, seconds_between, int(expiry)))
    return Live(now_ms, alive, passed)


@translated
def ping(client: redis.Redis) -> None:
    """Whether Redis answers at all (``PING``): raises if it does not."""
    client.ping()


@translated
def describe(client: redis.Redis) -> str:
    """Where ``client`` connects, for messages: host, port and database,
    never the credentials."""
    pool = getattr(client, "connection_pool", None)
    if pool is None:  # a cluster client: one pool per node
        nodes = client.get_nodes()  # type: ignore[attr-defined]
        return f"a Redis Cluster of {len(nodes)} node(s)"
    kwargs = pool.connection_kwargs
    db = kwargs.get("db", 0)
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}?db={db}"
    if "host" in kwargs:
        return f"{kwargs['host']}:{kwargs.get('port', 6379)}/{db}"
    # A pool that picks its servers itself (Sentinel, for instance).
    return f"the servers of {type(pool).__name__}"


class _Replies:
    """One shard's slice of the pipeline replies, with errors set aside."""

    def __init__(self, replies: list[Any]) -> None:
        self._replies = replies
        self.problems: list[str] = []

    def value(self, index: int) -> Any:
        reply = self._replies[index]
        if isinstance(reply, redis.ResponseError):
            message = str(reply)
            # A key or group that does not exist yet is an empty shard.
            if "no such key" not in message and "NOGROUP" not in message:
                self.problems.append(message)
            return None
        return reply

    def integer(self, index: int) -> int:
        value = self.value(index)
        return int(value) if value is not None else 0


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)
