"""Redis key names and the member encoding.

Layout, per queue and shard (``{queue:shard}`` is a Redis Cluster hash tag, so
every key of one shard lives in one slot and each Lua script touches one slot)::

    <prefix>:{<queue>:<shard>}:due:hi    ZSET    id: run_at ms, of the high band
    <prefix>:{<queue>:<shard>}:due       ZSET    id: run_at ms, of the normal band
    <prefix>:{<queue>:<shard>}:due:lo    ZSET    id: run_at ms, of the low band
    <prefix>:{<queue>:<shard>}:ready:hi  STREAM  due ids of the high band (priority > 0)
    <prefix>:{<queue>:<shard>}:ready     STREAM  due ids of the normal band (priority 0)
    <prefix>:{<queue>:<shard>}:ready:lo  STREAM  due ids of the low band (priority < 0)
    <prefix>:{<queue>:<shard>}:wake   LIST    one element: "a new head arrived"
    <prefix>:{<queue>:<shard>}:lease  STRING  token of the dispatcher owning the shard
    <prefix>:{<queue>:<shard>}:dead   STREAM  entries no worker could run, with why
    <prefix>:{<queue>:<shard>}:epoch  STRING  the shard's index marker (store.epochs)
    <prefix>:{<queue>:<shard>}:activity:<minute>  HASH  counters (store.activity)

A queue's limits shard, ``{<queue>:limits}`` (:data:`LIMITS_SHARD`), has
the same keys and those of its limits (see ``lua/limits.lua``).

and, per prefix, ``<prefix>:owner`` (see :mod:`django_delayq.ownership`),
``<prefix>:workers`` (:func:`workers_key`), ``<prefix>:sweeper`` (the sweep
lock, :func:`sweeper_lock_key`), ``<prefix>:sweepers``
(:func:`sweepers_key`) and ``<prefix>:paused`` (the paused queues,
:func:`paused_key`).

A member is the task id's 16 raw bytes: the smallest unique encoding, which
keeps Redis memory per scheduled task low. Each band has its own due-set, so
that a release without bands, which reads the normal band's keys only (the
ones it knows), never meets a task of another band while both releases run
during a deploy: its dispatcher would move it to the normal band's stream and
its workers refuse a member they cannot decode.

The release that introduced bands indexed every band in the normal band's
due-set, a high or low task's member having one more byte (``h`` or ``l``);
such *legacy members* are still read, moved to their band's stream and
removed (see ``lua/move.lua``), never written.
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
    ready_hi: str
    ready_lo: str
    due_hi: str
    due_lo: str
    epoch: str
    #: what every key of the shard starts with, its hash tag included
    base: str = ""

    @property
    def limited(self) -> bool:
        """Whether this is a queue's limits shard (:data:`LIMITS_SHARD`)."""
        return self.shard == LIMITS_SHARD

    @property
    def due_bands(self) -> tuple[str, str, str]:
        """The shard's due-sets, highest band first."""
        return (self.due_hi, self.due, self.due_lo)

    def due_of(self, priority: int) -> str:
        """The due-set a task of this priority is indexed in."""
        return self.due_bands[BANDS.index(band_of(priority))]

    def places(self, task_id: uuid.UUID) -> list[tuple[str, bytes]]:
        """Every (due-set, member) a task may be indexed under: its id in each
        band's due-set, and its legacy members in the normal band's. What
        removing a task removes, so that a caller needs no priority (an
        outbox entry has none) and a stray of a wrong band goes too."""
        return [
            (self.due_hi, task_id.bytes),
            (self.due, task_id.bytes),
            (self.due, legacy_member(task_id, HIGH)),
            (self.due, legacy_member(task_id, LOW)),
            (self.due_lo, task_id.bytes),
        ]

    @property
    def ready_bands(self) -> tuple[str, str, str]:
        """The shard's ready streams, highest band first (the order in which
        workers read them)."""
        return (self.ready_hi, self.ready, self.ready_lo)

    def ready_of(self, priority: int) -> str:
        """The ready stream a task of this priority is delivered by."""
        return self.ready_bands[BANDS.index(band_of(priority))]


#: The shard number of a queue's *limits shard*: the rows of tasks under a
#: concurrency or rate limit carry it, and their ids are indexed in its
#: due-sets, whose slot (``{<queue>:limits}``) also holds the limits' state
#: (see :mod:`django_delayq.limits`). Far above any real shard number (at
#: most 1024), and within every database's small integer.
LIMITS_SHARD = 32767


def shard_keys(prefix: str, queue: str, shard: int) -> ShardKeys:
    tag = "limits" if shard == LIMITS_SHARD else shard
    base = f"{prefix}:{{{queue}:{tag}}}"
    return ShardKeys(
        queue,
        shard,
        due=f"{base}:due",
        ready=f"{base}:ready",
        wake=f"{base}:wake",
        lease=f"{base}:lease",
        dead=f"{base}:dead",
        ready_hi=f"{base}:ready:hi",
        ready_lo=f"{base}:ready:lo",
        due_hi=f"{base}:due:hi",
        due_lo=f"{base}:due:lo",
        epoch=f"{base}:epoch",
        base=base,
    )


def shard_label(queue: str, shard: int) -> str:
    """How reports name a shard: ``orders:3``, or ``orders:limits``."""
    return f"{queue}:{'limits' if shard == LIMITS_SHARD else shard}"


def sweeper_lock_key(prefix: str) -> str:
    """The lock one sweep pass holds, so concurrent sweepers take turns."""
    return f"{prefix}:sweeper"


def sweepers_key(prefix: str) -> str:
    """The ZSET of sweepers that passed lately: member = ``<token>#<interval>``
    (seconds between its passes), score = the expiry of its last pass (epoch
    ms). The lock above exists only during a pass, so it cannot tell a
    deployment without a sweeper from one between two passes."""
    return f"{prefix}:sweepers"


def workers_key(prefix: str) -> str:
    """The ZSET of live worker processes: member = worker name, score = the
    expiry of its heartbeat (epoch ms). What the dashboard and status read
    for liveness: Redis' own idle time of a consumer grows while it blocks
    waiting for work, so it cannot tell an idle worker from a dead one."""
    return f"{prefix}:workers"


def paused_key(prefix: str) -> str:
    """The HASH mirroring the paused queues' rows, for the workers' check:
    queue name -> paused_at (epoch ms), with the fields of
    ``lua/paused.lua``. One key of its own: every command names it alone,
    so it lives in one slot of a Redis Cluster like any key."""
    return f"{prefix}:paused"


def dispatchers_key(prefix: str, queues: list[str]) -> str:
    """The ZSET of live dispatchers serving exactly these queues.

    Dispatchers balance shards only with peers serving the same queues, so
    dispatchers started with different ``--queue`` sets never hand each
    other's shards back and forth.
    """
    return f"{prefix}:dispatchers:{','.join(sorted(queues))}"


def handover_key(members_key: str) -> str:
    """The LIST a stopping dispatcher pushes to when it hands its shards
    back, which the other dispatchers of the same queues block on."""
    return f"{members_key}:handover"


#: The bands, highest first: the byte a legacy member carried for each (none
#: for the normal band).
BANDS = (b"h", b"", b"l")
HIGH, NORMAL, LOW = BANDS
_STREAM_RANK = {":ready:hi": 0, ":ready": 1, ":ready:lo": 2}


def band_of(priority: int) -> bytes:
    """The band of a priority: high above 0, low below 0, else normal."""
    return HIGH if priority > 0 else LOW if priority < 0 else NORMAL


def encode_member(task_id: uuid.UUID) -> bytes:
    return task_id.bytes


def legacy_member(task_id: uuid.UUID, band: bytes) -> bytes:
    """The member a task of ``band`` had in the normal band's due-set before
    each band had a due-set of its own: read and removed, never written."""
    return task_id.bytes + band


def decode_member(member: bytes) -> uuid.UUID:
    """Return the task id of a member; ``ValueError`` if it is not one."""
    return split_member(member)[0]


def split_member(member: bytes) -> tuple[uuid.UUID, bytes]:
    """Return the task id and band of a member, a legacy one included (the
    band of a bare id is the normal one, whichever due-set holds it);
    ``ValueError`` if it is not one."""
    if len(member) == 16:
        return uuid.UUID(bytes=bytes(member)), NORMAL
    if len(member) == 17 and member[16:] in (HIGH, LOW):
        return uuid.UUID(bytes=bytes(member[:16])), bytes(member[16:])
    raise ValueError(f"not a task id: {member!r}")


def stream_rank(stream: str) -> int:
    """0 for a high band ready stream, 1 normal, 2 low: the order in which a
    worker starts what it read."""
    for suffix in (":ready:hi", ":ready:lo"):
        if stream.endswith(suffix):
            return _STREAM_RANK[suffix]
    return 1
