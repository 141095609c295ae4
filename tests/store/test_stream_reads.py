"""A worker's read of several shards at once, on a real Redis: what one
shard's read delivered is handed over even when another shard's read fails
(its group gone after Redis restarted empty or was flushed): delivered and
unseen, those entries would wait for the visibility timeout."""

from __future__ import annotations

import redis

from django_delayq.store import scripts, streams
from django_delayq.store.keys import shard_keys


def _bands(shard: int) -> list[str]:
    return list(shard_keys("delayq", "orders", shard).ready_bands)


def test_a_shard_whose_group_is_gone_does_not_hide_what_the_others_delivered(
    redis_client: redis.Redis,
) -> None:
    healthy, lost_shard = _bands(0), _bands(1)
    streams.ensure_groups(redis_client, healthy)
    # The other shard's stream exists, without its group (made again by a
    # dispatcher's move after a restart, before any worker's read).
    redis_client.xadd(lost_shard[0], {"id": b"b" * 16})
    ids = [redis_client.xadd(healthy[0], {"id": bytes([n]) * 16}) for n in range(3)]
    calls: list[str] = []

    read = streams.read_bands(
        redis_client,
        "w1",
        [healthy, lost_shard],
        count=10,
        lost=lambda: calls.append("lost"),
    )

    assert [entry.entry_id for entry in read] == ids
    assert calls == ["lost"]  # the missing group says Redis lost data
    # Nothing is left delivered and unhanded: the only pending entries are
    # those the read returned.
    pending = redis_client.xpending(healthy[0], streams.GROUP)
    assert pending["pending"] == len(ids)
    # The lost shard's group is back, from the start of its stream: its
    # entry is read next.
    again = streams.read_bands(redis_client, "w1", [healthy, lost_shard], count=10)
    assert [entry.stream for entry in again] == [lost_shard[0]]


def test_run_each_gives_each_call_its_own_reply_and_sends_a_missing_script_again(
    redis_client: redis.Redis,
) -> None:
    healthy, missing = _bands(0), _bands(1)
    streams.ensure_groups(redis_client, healthy)
    redis_client.xadd(missing[0], {"id": b"m" * 16})
    redis_client.xadd(healthy[0], {"id": b"h" * 16})
    redis_client.script_flush()  # as after a restart: NOSCRIPT for every call
    script = scripts.load("read")

    replies = scripts.run_each(
        redis_client,
        [
            (script, healthy, [streams.GROUP, "w1", 10]),
            (script, missing, [streams.GROUP, "w1", 10]),
        ],
    )

    first, second = replies
    assert first[0][0].decode() == healthy[0]
    assert len(first[0][1]) == 1
    assert isinstance(second, redis.ResponseError)
    assert "NOGROUP" in str(second)
    # The healthy shard's entry was delivered once, not read twice.
    assert redis_client.xpending(healthy[0], streams.GROUP)["pending"] == 1
