"""The store is the only code that talks to Redis, and every failure leaves
it as one exception, RedisUnavailable, which the loops catch."""

from __future__ import annotations

import pickle
import uuid

import pytest
import redis

from django_delayq.exceptions import DelayQueueException, RedisUnavailable
from django_delayq.store import connection, index, inspect, leases, streams
from django_delayq.store.errors import FAILED, Answers, error_text
from django_delayq.store.keys import shard_keys
from tests.conftest import delayq_settings
from tools.servers import free_port


def test_an_unreachable_redis_is_redis_unavailable(settings):
    settings.DELAYQ = delayq_settings(f"redis://127.0.0.1:{free_port()}/0")
    connection.reset()
    try:
        client = connection.get_client("loop")
        entry = index.IndexEntry(uuid.uuid4(), "orders", 0, 1)
        with pytest.raises(RedisUnavailable) as caught:
            index.add([entry], client)
    finally:
        connection.reset()
    error = caught.value
    assert isinstance(error.__cause__, redis.ConnectionError)
    assert error.unreachable
    assert str(error).startswith("ConnectionError: Error 111 connecting to")
    assert error_text(error) == str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.unreachable) == (str(error), True)
    # Code that catches either family keeps working.
    assert isinstance(error, DelayQueueException)
    assert isinstance(error, redis.RedisError)


def test_an_error_reply_is_redis_unavailable_but_not_unreachable(redis_client):
    """A key of ours holding the wrong type (someone wrote to it): the command
    did not happen, and the message says what Redis said."""
    client = connection.get_client("loop")
    keys = shard_keys("delayq", "orders", 0)
    redis_client.set(keys.lease, "dispatcher-1")  # the lease is ours
    redis_client.set(keys.due, "not a sorted set")
    with pytest.raises(RedisUnavailable, match="ResponseError: WRONGTYPE") as caught:
        index.move_due(client, keys, "dispatcher-1", 100)
    assert not caught.value.unreachable
    # Iterating a store generator is covered too, not only calling it.
    pages = inspect.due_members(client, keys.due, 10**15)
    with pytest.raises(RedisUnavailable, match="WRONGTYPE"):
        next(pages)


def test_errors_the_store_handles_never_leave_it(redis_client):
    """NOSCRIPT (a Redis that lost its script cache) and NOGROUP (a stream
    that lost its consumer group) are handled inside the store."""
    client = connection.get_client("loop")
    keys = shard_keys("delayq", "orders", 0)
    assert leases.take(client, keys.lease, "dispatcher-1", 10_000)
    redis_client.script_flush()
    assert leases.take(client, keys.lease, "dispatcher-1", 10_000)
    assert not leases.take(client, keys.lease, "dispatcher-2", 10_000)

    redis_client.xadd(keys.ready, {"id": uuid.uuid4().bytes})  # no group
    assert streams.read(client, "c", [keys.ready], count=10, block_ms=None) == []
    assert len(streams.read(client, "c", [keys.ready], count=10, block_ms=None)) == 1


def test_calls_shard_by_shard_fail_only_when_no_redis_answered():
    def refused() -> None:
        raise RedisUnavailable(ConnectionError("refused"))

    some = Answers()
    assert some.call(refused) is FAILED
    assert some.call(lambda: 7) == 7
    some.raise_if_none_answered()  # one answered: the others go on

    none = Answers()
    assert none.call(refused) is FAILED
    with pytest.raises(RedisUnavailable, match="refused"):
        none.raise_if_none_answered()

    # An error Redis answered with is an answer: Redis is up.
    wrong_type = Answers()
    wrong_type.failed(RedisUnavailable("WRONGTYPE"), answered=True)
    wrong_type.raise_if_none_answered()
