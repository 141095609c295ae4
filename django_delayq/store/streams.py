"""The ready streams: consumer groups, reads, acks, heartbeats, reclaims.

Workers of a queue read each shard's ready stream through one consumer group,
:data:`GROUP`. An entry's only field is ``id``: the 16-byte task id. Nothing
else in an entry is trusted; the worker loads everything it runs from the row.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from ..exceptions import RedisPermissionDenied, RedisUnavailable
from . import activity, scripts
from .broken import is_wrong_type, keys_of_type, report_wrong_type
from .errors import translated
from .keys import decode_member, stream_rank

GROUP = "workers"
#: Dead-letter streams keep at most about this many entries per shard.
DEAD_MAXLEN = 10_000
#: Entry ids per script call, far from Lua's ``unpack()`` stack limit.
CHUNK = 1000


@dataclass(frozen=True)
class Entry:
    stream: str
    entry_id: bytes
    fields: dict[bytes, bytes]
    reclaimed: bool = False

    @property
    def task_id(self) -> uuid.UUID | None:
        """The task id this entry names, or None if it is not a valid entry."""
        if set(self.fields) != {b"id"}:
            return None
        try:
            return decode_member(self.fields[b"id"])
        except ValueError:
            return None


@translated
def ensure_groups(client: redis.Redis, streams: Sequence[str]) -> None:
    """Create the consumer group on every stream (and the stream) if missing.

    The group starts at id 0, so entries added before it existed are read too.
    """
    for stream in streams:
        try:
            client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if is_wrong_type(exc):
                report_wrong_type(stream, "a stream")  # the others go on
            elif "BUSYGROUP" not in str(exc):
                raise


@translated
def read(
    client: redis.Redis,
    consumer: str,
    streams: Sequence[str],
    *,
    count: int,
    block_ms: int | None,
    lost: Callable[[], None] | None = None,
) -> list[Entry]:
    """Read new entries for ``consumer``; block up to ``block_ms`` (None: don't).

    A stream key that holds another type (written by hand, or by a bug) would
    fail the read of every stream: it is left out, and logged, until the
    sweeper replaces it. A missing group is made again, and ``lost`` called:
    Redis lost its data (``FLUSHALL``, a restart without persistence).
    """
    try:
        reply = client.xreadgroup(
            GROUP, consumer, {s: ">" for s in streams}, count=count, block=block_ms
        )
    except redis.ResponseError as exc:
        if is_wrong_type(exc):
            usable = keys_of_type(client, streams, "stream")
            if not usable or len(usable) == len(streams):
                raise
            return read(
                client, consumer, usable, count=count, block_ms=block_ms, lost=lost
            )
        if "NOGROUP" not in str(exc):
            raise
        # Redis lost the group (FLUSHALL, restart without persistence).
        ensure_groups(client, streams)
        if lost is not None:
            lost()
        return []
    return _entries(reply)


def by_band(entries: Sequence[Entry]) -> list[Entry]:
    """``entries`` highest band first; in read order within a band."""
    return sorted(entries, key=lambda entry: stream_rank(entry.stream))


@translated
def read_bands(
    client: redis.Redis,
    consumer: str,
    shards: Sequence[Sequence[str]],
    *,
    count: int,
    lost: Callable[[], None] | None = None,
) -> list[Entry]:
    """Read new entries without blocking, each shard's bands highest first
    (see ``lua/read.lua``): ``shards`` holds each shard's ready streams,
    highest band first. One script call per shard, in one round trip.

    Returns them highest band first. A missing group or a key of another
    type takes :func:`read`, which repairs or skips it (and calls ``lost``
    for a group that was missing).
    """
    script = scripts.load("read")
    calls: list[scripts.Call] = [
        (script, list(bands), [GROUP, consumer, count]) for bands in shards
    ]
    if len(calls) == 1:
        try:
            replies = [script(client, *calls[0][1:])]
        except RedisUnavailable as exc:
            if _not_a_broken_key(exc):
                raise
            # (read.lua returns what a shard's streams before the failing one
            # gave, and fails only when they gave nothing.)
            replies = [exc]
    else:
        # Each shard's reply on its own: entries one shard's read delivered
        # are handed over even if another shard's read failed.
        replies = scripts.run_each(client, calls)
    entries = []
    failed: list[str] = []
    for bands, reply in zip(shards, replies, strict=True):
        if isinstance(reply, Exception):
            failed.extend(bands)
            continue
        for stream, items in reply or ():
            name = stream.decode() if isinstance(stream, bytes) else stream
            for entry_id, flat in items:
                fields = dict(zip(flat[::2], flat[1::2], strict=True))
                entries.append(Entry(name, entry_id, fields))
    if failed:
        # A shard whose read failed (its group lost, a key of another type)
        # is read the plain way, which repairs or skips what is broken.
        try:
            entries += read(
                client,
                consumer,
                failed,
                count=max(count - len(entries), 1),
                block_ms=None,
                lost=lost,
            )
        except RedisUnavailable as exc:
            # Keys of another type only (the sweeper replaces them): what the
            # other shards delivered is still handed over.
            if not entries or _not_a_broken_key(exc):
                raise
    return by_band(entries)


def _not_a_broken_key(exc: RedisUnavailable) -> bool:
    """Whether a failed read is no broken key to read around: a connection
    that failed, or a refused command (reading another way would hide what
    the ACL user lacks)."""
    return not isinstance(exc.__cause__, redis.ResponseError) or isinstance(
        exc, RedisPermissionDenied
    )


@translated
def reclaim(
    client: redis.Redis,
    stream: str,
    consumer: str,
    *,
    min_idle_ms: int,
    count: int,
    start: str = "0-0",
) -> tuple[list[Entry], str]:
    """Take over entries idle longer than ``min_idle_ms`` (their worker died).

    Returns the entries and the cursor to pass as ``start`` next time
    (``"0-0"`` once the scan went round the whole pending list).
    """
    try:
        reply: Any = client.xautoclaim(
            stream, GROUP, consumer, min_idle_ms, start_id=start, count=count
        )
    except redis.ResponseError as exc:
        if is_wrong_type(exc):
            report_wrong_type(stream, "a stream")
            return [], "0-0"
        if "NOGROUP" not in str(exc):
            raise
        ensure_groups(client, [stream])
        return [], "0-0"
    cursor = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
    entries = [
        Entry(stream, entry_id, dict(fields), reclaimed=True)
        for entry_id, fields in reply[1]
        if fields  # an entry deleted meanwhile comes back without fields
    ]
    return entries, cursor


@translated
def take_over(
    client: redis.Redis, stream: str, prefix: str, consumer: str
) -> list[Entry]:
    """Move every entry pending for the consumers named ``prefix...`` (a
    dead worker's threads) to ``consumer``, and delete those consumers.

    Returns the entries still in the stream, with their fields.
    """
    try:
        info: Any = client.xinfo_consumers(stream, GROUP)
    except redis.ResponseError as exc:
        if "NOGROUP" not in str(exc) and "no such key" not in str(exc):
            raise
        return []  # Redis lost the stream: the sweeper re-indexes the rows
    entries: list[Entry] = []
    for each in info:
        name = each["name"]
        name = name.decode() if isinstance(name, bytes) else name
        if not name.startswith(prefix):
            continue
        seen: set[bytes] = set()
        while True:
            pending: Any = client.xpending_range(
                stream, GROUP, "-", "+", 1000, consumername=name
            )
            fresh = [p for p in pending if p["message_id"] not in seen]
            if not fresh:
                break
            ids = [p["message_id"] for p in fresh]
            seen.update(ids)
            # Only if still as idle as listed: an entry a live worker took
            # over meanwhile (its idle time restarted) stays that worker's.
            idle = min(p["time_since_delivered"] for p in fresh)
            claimed: Any = client.xclaim(stream, GROUP, consumer, idle, ids)
            entries.extend(
                Entry(stream, entry_id, dict(fields), reclaimed=True)
                for entry_id, fields in claimed
                # An entry deleted meanwhile comes back empty (Redis 7 also
                # drops it from the pending list).
                if fields
            )
        # What it still lists is deleted entries only (older Redis keeps
        # them pending): deleting the consumer drops them too.
        client.xgroup_delconsumer(stream, GROUP, name)
    return entries


@translated
def heartbeat(client: redis.Redis, in_flight: dict[str, dict[bytes, str]]) -> None:
    """Reset the idle time of in-flight entries so no live worker's task is
    reclaimed. ``in_flight`` maps stream -> entry id -> owning consumer."""
    pipe = client.pipeline(transaction=False)
    for stream, entries in in_flight.items():
        by_consumer: dict[str, list[Any]] = {}
        for entry_id, consumer in entries.items():
            by_consumer.setdefault(consumer, []).append(entry_id)
        for consumer, ids in by_consumer.items():
            pipe.xclaim(stream, GROUP, consumer, 0, ids, justid=True)
    if pipe.command_stack:
        pipe.execute()


@translated
def finish(client: redis.Redis, stream: str, entry_id: bytes) -> None:
    """Acknowledge and delete an entry, atomically (see ``lua/finish.lua``)."""
    scripts.load("finish")(client, [stream], [GROUP, 1, entry_id])


@translated
def finish_many(
    client: redis.Redis,
    entries: Sequence[Entry],
    tallies: Mapping[str, activity.Tally] | None = None,
    also: Sequence[scripts.Call] = (),
) -> None:
    """Acknowledge and delete many entries, in one round trip, and add each
    stream's ``tallies`` (what its entries' tasks did) to its shard's
    counters of this minute in the same script call
    (:mod:`~django_delayq.store.activity`); ``also``: more script calls for
    the same round trip (the release of the limits' slots of the entries).

    One script call per stream: a call never spans two streams, whose keys
    may live on different cluster nodes.
    """
    by_stream: dict[str, list[bytes]] = {}
    for entry in entries:
        by_stream.setdefault(entry.stream, []).append(entry.entry_id)
    script = scripts.load("finish")
    minute = activity.current_minute()
    calls: list[tuple[list[str], list[scripts.ArgT]]] = []
    for stream, ids in by_stream.items():
        tally = (tallies or {}).get(stream)
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start : start + CHUNK]
            keys = [stream]
            argv: list[scripts.ArgT] = [GROUP, len(chunk), *chunk]
            if start == 0 and tally is not None and tally.counts:
                keys.append(activity.activity_key(stream, minute))
                argv += activity.script_args(tally)
            calls.append((keys, argv))
    if len(calls) == 1 and not also:
        script(client, *calls[0])
    elif calls or also:
        scripts.run_many(
            client, [*((script, keys, argv) for keys, argv in calls), *also]
        )


@translated
def requeue(client: redis.Redis, entries: Sequence[Entry]) -> None:
    """Put entries back as new ones (readable by any consumer), in one trip."""
    pipe = client.pipeline(transaction=False)
    for entry in entries:
        fields: dict[Any, Any] = dict(entry.fields)
        pipe.xadd(entry.stream, fields)
        pipe.xack(entry.stream, GROUP, entry.entry_id)
        pipe.xdel(entry.stream, entry.entry_id)
    pipe.execute()


@translated
def remove_idle_consumers(
    client: redis.Redis, streams: Sequence[str], consumers: Sequence[str]
) -> None:
    """Delete the named consumers that have nothing pending.

    A consumer with pending entries is kept: deleting it would drop them from
    the group's pending list, and nobody could reclaim them.
    """
    names = set(consumers)
    for stream in streams:
        info: Any = client.xinfo_consumers(stream, GROUP)
        for consumer in info:
            name = consumer["name"]
            name = name.decode() if isinstance(name, bytes) else name
            if name in names and not consumer["pending"]:
                client.xgroup_delconsumer(stream, GROUP, name)


@translated
def dead_letter(client: redis.Redis, dead: str, entry: Entry, reason: str) -> None:
    """Keep an entry no worker can run, with the reason, then finish it."""
    fields: dict[Any, Any] = {
        b"reason": reason.encode(),
        b"stream": entry.stream.encode(),
        b"entry": entry.entry_id,
    }
    for key, value in list(entry.fields.items())[:16]:
        fields[b"field:" + key[:64]] = value[:1024]
    client.xadd(dead, fields, maxlen=DEAD_MAXLEN, approximate=True)
    finish(client, entry.stream, entry.entry_id)


def _entries(reply: Any) -> list[Entry]:
    entries = []
    for stream, items in reply or ():
        name = stream.decode() if isinstance(stream, bytes) else stream
        for entry_id, fields in items:
            entries.append(Entry(name, entry_id, dict(fields or {})))
    return entries
