"""Reading the index in bulk, for reconciliation (which ids are where), and
the server's settings, for the deployment checks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import redis

from .errors import translated
from .keys import BANDS, all_members, decode_member

PAGE = 1000


@translated
def due_scores(
    client: redis.Redis, due: str, task_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, dict[bytes, int]]:
    """Each id's members in the due-set, in any band: band -> score (empty
    if absent); one ZMSCORE per page."""
    found: dict[uuid.UUID, dict[bytes, int]] = {}
    for start in range(0, len(task_ids), PAGE):
        page = task_ids[start : start + PAGE]
        members: list[Any] = [m for t in page for m in all_members(t)]
        scores: Any = client.zmscore(due, members)
        for number, task_id in enumerate(page):
            each = scores[number * len(BANDS) : (number + 1) * len(BANDS)]
            found[task_id] = {
                band: int(score)
                for band, score in zip(BANDS, each, strict=True)
                if score is not None
            }
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
