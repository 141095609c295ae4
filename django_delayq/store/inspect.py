"""Reading the index in bulk, for reconciliation (which ids are where), and
the server's settings, for the deployment checks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import redis

from .errors import translated
from .keys import ShardKeys, decode_member

PAGE = 1000


#: Where a task is indexed: a due-set, and its member there.
Place = tuple[str, bytes]


@translated
def due_scores(
    client: redis.Redis, keys: ShardKeys, task_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, dict[Place, int]]:
    """Each id's members in the shard's due-sets, wherever a task may be
    indexed (:meth:`~.keys.ShardKeys.places`): place -> score (empty if
    absent); one ZMSCORE per due-set and page, in one round trip a page."""
    found: dict[uuid.UUID, dict[Place, int]] = {}
    for start in range(0, len(task_ids), PAGE):
        page = task_ids[start : start + PAGE]
        places = [
            (task_id, place) for task_id in page for place in keys.places(task_id)
        ]
        by_key: dict[str, list[tuple[uuid.UUID, bytes]]] = {}
        for task_id, (key, member) in places:
            by_key.setdefault(key, []).append((task_id, member))
        pipe = client.pipeline(transaction=False)
        for key, members in by_key.items():
            named: list[Any] = [member for _, member in members]
            pipe.zmscore(key, named)
        replies: list[Any] = pipe.execute()
        for task_id in page:
            found[task_id] = {}
        for (key, members), scores in zip(by_key.items(), replies, strict=True):
            for (task_id, member), score in zip(members, scores, strict=True):
                if score is not None:
                    found[task_id][key, member] = int(score)
    return found


@translated
def due_members(
    client: redis.Redis, due: str, max_score: int
) -> Iterator[list[tuple[uuid.UUID | None, bytes, int]]]:
    """Pages of (task id or None if malformed, raw member, score) up to a score."""
    offset = 0
    while True:
        page: Any = client.zrangebyscore(
            due, "-inf", max_score, start=offset, num=PAGE, withscores=True
        )
        if not page:
            return
        yield [(_decode(member), member, int(score)) for member, score in page]
        if len(page) < PAGE:
            return
        offset += PAGE


@translated
def stream_task_ids(client: redis.Redis, streams: Sequence[str]) -> set[uuid.UUID]:
    """Every task id named by an entry still in one of the ready ``streams``
    (a shard's bands)."""
    ids: set[uuid.UUID] = set()
    for stream in streams:
        ids |= _stream_task_ids(client, stream)
    return ids


@translated
def waiting_task_ids(client: redis.Redis, base: str) -> set[uuid.UUID]:
    """Every task id waiting for a limit on the limits shard whose keys
    start with ``base`` (see ``lua/limits.lua``): due, placed in its
    group's line, not yet admitted."""
    ids: set[uuid.UUID] = set()
    groups: Any = client.hkeys(f"{base}:gstate")
    for group in groups:
        wait = f"{base}:wait:".encode() + group
        offset = 0
        while True:
            page: Any = client.zrange(wait, offset, offset + PAGE - 1)
            ids.update(i for i in map(_decode, page) if i is not None)
            if len(page) < PAGE:
                break
            offset += PAGE
    return ids


def _stream_task_ids(client: redis.Redis, stream: str) -> set[uuid.UUID]:
    ids: set[uuid.UUID] = set()
    start = "-"
    while True:
        entries: Any = client.xrange(stream, min=start, max="+", count=PAGE)
        for _entry_id, fields in entries:
            task_id = _decode(fields.get(b"id", b""))
            if task_id is not None:
                ids.add(task_id)
        if len(entries) < PAGE:
            return ids
        last = entries[-1][0].decode()
        start = "(" + last


def _decode(member: bytes) -> uuid.UUID | None:
    try:
        return decode_member(member)
    except ValueError:
        return None


@translated
def server_config(client: redis.Redis, names: Sequence[str]) -> dict[str, str]:
    """The values of the Redis settings ``names`` (``CONFIG GET``), for the
    deployment checks; empty where ``CONFIG`` is refused (managed Redis
    services rename or disable it). On a cluster, one node's answer."""
    values: dict[str, str] = {}
    for name in names:
        try:
            reply: Any = client.config_get(name)
        except redis.ResponseError:
            return {}
        if reply and all(isinstance(v, dict) for v in reply.values()):
            reply = next(iter(reply.values()))  # a cluster answers per node
        value = reply.get(name) if reply else None
        if value is not None:
            values[name] = value.decode() if isinstance(value, bytes) else str(value)
    return values
