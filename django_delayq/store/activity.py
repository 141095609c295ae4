"""Per-minute activity counters: what the workers did, minute by minute.

Per shard and minute, one hash::

    <prefix>:{<queue>:<shard>}:activity:<minute>   HASH   TTL ACTIVITY_TTL

where ``<minute>`` is the Unix time in whole minutes (the worker's clock),
and its fields count the attempts the workers acknowledged in that minute:

    started      attempts started
    succeeded    attempts that succeeded
    failed       attempts that raised (retried or failed for good)
    late:<ms>    attempts that started at most <ms> after their run_at
                 (the smallest of LATENESS_BUCKETS_MS that holds it)
    late:inf     attempts later than the largest bucket

The key carries its shard's hash tag, so the worker adds the counters in the
script call that acknowledges the entries (``finish.lua``, whose two keys
are then of one slot), and a burst adds no command and no round trip.
Nothing is written while nothing runs: an idle deployment sends no command
for them.
"""

from __future__ import annotations

import bisect
import datetime
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from ..conf import QueueSettings
from .errors import translated
from .keys import shard_keys

#: Upper bounds of the lateness buckets, in milliseconds.
LATENESS_BUCKETS_MS = (
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
)
#: A minute's counters live a little over the hour the dashboard shows.
ACTIVITY_TTL = 3_900
#: Minutes the dashboard reads.
WINDOW_MINUTES = 60

STARTED, SUCCEEDED, FAILED = "started", "succeeded", "failed"
OVERFLOW = "late:inf"


#: The field of each bucket, in the order of LATENESS_BUCKETS_MS, then the
#: overflow: made once, as every attempt a worker finishes looks one up.
_BUCKET_FIELDS = (*(f"late:{bound}" for bound in LATENESS_BUCKETS_MS), OVERFLOW)


def bucket_field(late_ms: float) -> str:
    """The lateness field an attempt ``late_ms`` after its run_at counts in."""
    return _BUCKET_FIELDS[bisect.bisect_left(LATENESS_BUCKETS_MS, max(late_ms, 0))]


@dataclass
class Tally:
    """What one acknowledgement adds to one shard's minute."""

    counts: Counter[str] = field(default_factory=Counter)

    def add(self, *, succeeded: bool, late_ms: float) -> None:
        self.counts[STARTED] += 1
        self.counts[SUCCEEDED if succeeded else FAILED] += 1
        self.counts[bucket_field(late_ms)] += 1


def activity_key(ready_key: str, minute: int) -> str:
    """The counters of the shard whose ready stream (of any band) is
    ``ready_key``: one hash per shard and minute, whatever the band."""
    for suffix in (":ready:hi", ":ready:lo", ":ready"):
        if ready_key.endswith(suffix):
            return f"{ready_key.removesuffix(suffix)}:activity:{minute}"
    raise ValueError(f"not a ready stream: {ready_key!r}")


def current_minute(now: datetime.datetime | None = None) -> int:
    moment = now or datetime.datetime.now(datetime.UTC)
    return int(moment.timestamp() // 60)


def script_args(tally: Tally) -> list[str | int]:
    """The arguments ``finish.lua`` takes after the entry ids to add ``tally``
    to the shard's counters: the TTL, then field and amount pairs."""
    args: list[str | int] = [ACTIVITY_TTL]
    for name, amount in sorted(tally.counts.items()):
        args += [name, amount]
    return args


@dataclass
class Minute:
    """The counters of one minute, summed over the shards read."""

    start: datetime.datetime
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def started(self) -> int:
        return self.counts[STARTED]

    @property
    def succeeded(self) -> int:
        return self.counts[SUCCEEDED]

    @property
    def failed(self) -> int:
        return self.counts[FAILED]

    def lateness_quantile(self, q: float) -> int | None:
        """The upper bound (ms) of the bucket holding the ``q`` quantile of
        lateness, or None when nothing started; the overflow bucket answers
        with twice the largest bound."""
        buckets = [
            (bound, self.counts[f"late:{bound}"]) for bound in LATENESS_BUCKETS_MS
        ]
        buckets.append((2 * LATENESS_BUCKETS_MS[-1], self.counts[OVERFLOW]))
        total = sum(count for _, count in buckets)
        if not total:
            return None
        rank = q * total
        seen = 0
        for bound, count in buckets:
            seen += count
            if seen >= rank:
                return bound
        return buckets[-1][0]


@translated
def read_hour(
    client: redis.Redis,
    prefix: str,
    queues: Iterable[QueueSettings],
    now: datetime.datetime,
) -> list[Minute]:
    """The last :data:`WINDOW_MINUTES` minutes (the current one last), summed
    over every shard of ``queues``, in one round trip (``HGETALL`` per shard
    and minute, in a pipeline that a cluster client splits by node)."""
    last = current_minute(now)
    minutes = range(last - WINDOW_MINUTES + 1, last + 1)
    readies = [
        shard_keys(prefix, queue.name, number).ready
        for queue in queues
        for number in range(queue.shards)
    ]
    pipe = client.pipeline(transaction=False)
    for ready in readies:
        for minute in minutes:
            pipe.hgetall(activity_key(ready, minute))
    replies: Sequence[Any] = pipe.execute(raise_on_error=False)
    result = [
        Minute(datetime.datetime.fromtimestamp(minute * 60, datetime.UTC))
        for minute in minutes
    ]
    for index, reply in enumerate(replies):
        if not isinstance(reply, dict):
            continue  # a key of another type (written by hand): not counted
        into = result[index % len(minutes)].counts
        for name, value in reply.items():
            try:
                into[_text(name)] += int(value)
            except ValueError:
                continue
    return result


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
