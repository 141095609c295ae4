"""Writing task ids into, and out of, the shards' due-sets, and moving the
due ones to the ready streams."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import redis

from ..conf import get_settings
from ..exceptions import RedisUnavailable
from . import scripts
from .broken import report_wrong_type, wrong_types
from .errors import translated
from .keys import BANDS, ShardKeys, band_of, encode_member, shard_keys

#: Members per script call: bounded so ``unpack()`` in Lua stays far from its
#: stack limit and one call never blocks Redis for long.
CHUNK = 1000


class IndexEntry(NamedTuple):
    task_id: uuid.UUID
    queue: str
    shard: int
    score: int  # run_at in epoch milliseconds
    priority: int = 0


@translated
def add(entries: Iterable[IndexEntry], client: redis.Redis) -> None:
    """Add (or move) entries in their due-sets (each its band's), in one
    round trip.

    Each shard's dispatcher is woken if one of its new entries is its earliest.
    """
    add_script = scripts.load("add")
    prefix = get_settings().key_prefix
    calls = []
    for (queue, shard), group in _by_shard(entries).items():
        keys = shard_keys(prefix, queue, shard)
        for start in range(0, len(group), CHUNK):
            argv: list[scripts.ArgT] = []
            for entry in group[start : start + CHUNK]:
                # The index of the entry's due-set among the script's KEYS.
                band = BANDS.index(band_of(entry.priority)) + 1
                argv += (band, entry.score, encode_member(entry.task_id))
            calls.append(((*keys.due_bands, keys.wake), argv))
    if len(calls) == 1:
        add_script(client, *calls[0])
    elif calls:
        scripts.run_many(client, [(add_script, keys, argv) for keys, argv in calls])


@translated
def remove(entries: Iterable[IndexEntry], client: redis.Redis) -> None:
    """Remove entries from their due-sets, in one round trip.

    An entry already moved to a ready stream stays there; the worker skips it
    because the row says it is no longer scheduled. Each task is removed from
    every band's due-set, under every member it may have there
    (:meth:`~.keys.ShardKeys.places`): the caller needs no priority (an
    outbox entry has none), and a stray of a wrong band goes too.
    """
    prefix = get_settings().key_prefix
    groups = _by_shard(entries)
    if not groups:
        return
    pipe = client.pipeline(transaction=False)
    for (queue, shard), group in groups.items():
        keys = shard_keys(prefix, queue, shard)
        by_key: dict[str, list[bytes]] = defaultdict(list)
        for entry in group:
            for key, member in keys.places(entry.task_id):
                by_key[key].append(member)
        for key, members in by_key.items():
            for start in range(0, len(members), CHUNK):
                pipe.zrem(key, *members[start : start + CHUNK])
    pipe.execute()


@translated
def remove_members(client: redis.Redis, due: str, members: Sequence[bytes]) -> int:
    """Remove raw members from the due-set ``due``; how many were there."""
    return int(client.zrem(due, *members)) if members else 0


class Moved(NamedTuple):
    """What one ``move.lua`` call did on a shard."""

    #: due ids moved to the ready streams; -1 if the caller's lease is gone
    moved: int
    #: due time of the shard's earliest remaining task, epoch milliseconds
    #: on Redis' clock; -1 if the due-sets are empty
    head: int
    #: Redis' clock when it moved them, epoch milliseconds and the
    #: microseconds past the millisecond
    redis_ms: int
    redis_us: int
    #: whether the shard's index marker exists (:mod:`.epochs`): False after
    #: Redis lost the shard's keys
    marked: bool = True
    #: whether the server had to be sent the script (``NOSCRIPT``): it
    #: restarted, or is a replica just promoted, since this process last
    #: moved there (:mod:`.epochs`)
    reloaded: bool = False


@translated
def move_due(client: redis.Redis, keys: ShardKeys, token: str, limit: int) -> Moved:
    """Move up to ``limit`` ids due by Redis' clock from the shard's due-sets
    to its ready streams, each band's to its own, if ``token`` holds the
    shard's lease (atomically: see ``lua/move.lua``); also say whether Redis
    may have lost the shard's data (see :mod:`.epochs`)."""
    try:
        reply, reloaded = scripts.load("move").run(
            client,
            (*keys.due_bands, *keys.ready_bands, keys.lease, keys.epoch),
            (token, limit),
        )
    except RedisUnavailable as exc:  # scripts raise it already
        if "WRONGTYPE" in str(exc):
            # Say which key, which the script's error does not.
            expected = {due: "zset" for due in keys.due_bands}
            expected.update({stream: "stream" for stream in keys.ready_bands})
            for key, found in wrong_types(client, expected).items():
                report_wrong_type(key, f"a {expected[key]}", f"a {found}")
        raise
    moved, head, redis_ms, redis_us, marked = reply
    return Moved(
        int(moved), int(head), int(redis_ms), int(redis_us), bool(marked), reloaded
    )


def _by_shard(entries: Iterable[IndexEntry]) -> dict[tuple[str, int], list[IndexEntry]]:
    groups: dict[tuple[str, int], list[IndexEntry]] = defaultdict(list)
    for entry in entries:
        groups[entry.queue, entry.shard].append(entry)
    return groups
