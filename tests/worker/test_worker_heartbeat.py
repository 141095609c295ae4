"""A worker's heartbeat after Redis lost its data: written again at once, not
at the next beat, a third of the visibility timeout later, so that
``delayq_status`` does not report the worker dead meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from django_delayq.status import collect
from django_delayq.worker import Worker
from tools.procs import wait_for
from tools.servers import RedisServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

#: Long, so that the next regular beat (a third of it) is far away.
VISIBILITY_TIMEOUT = 300.0
#: How soon after the loss the worker must be seen alive again: well before
#: the next regular beat (100 s away), with room for a loaded CI machine,
#: where a status read and the worker's own look each take their time.
WITHIN = 30.0


@pytest.fixture
def worker(private_redis: RedisServer) -> Iterator[Worker]:
    running = Worker(queues=["default"], visibility_timeout=VISIBILITY_TIMEOUT)
    thread = threading.Thread(target=running.run)
    thread.start()
    try:
        yield running
    finally:
        running.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()


def seen_alive(worker: Worker) -> bool:
    return worker.name in collect(probe=True).workers


def flushall(server: RedisServer) -> None:
    server.client().flushall()


def restart_empty(server: RedisServer) -> None:
    server.kill()
    server.start()


@pytest.mark.parametrize(
    "lose",
    [flushall, restart_empty],
    ids=["FLUSHALL", "restarted empty"],
)
def test_a_worker_is_seen_alive_again_soon_after_redis_lost_its_heartbeat(
    worker: Worker,
    private_redis: RedisServer,
    lose: Callable[[RedisServer], None],
) -> None:
    wait_for(lambda: seen_alive(worker), 30, "the worker's heartbeat")
    lost_at = time.monotonic()
    lose(private_redis)
    wait_for(
        lambda: seen_alive(worker),
        WITHIN,
        "the worker's heartbeat written again",
        ignoring=(ConnectionError,),
    )
    # Far sooner than the next regular beat would have come.
    assert time.monotonic() - lost_at < WITHIN < VISIBILITY_TIMEOUT / 3
    unserved = "no live worker serves queue 'default'"
    assert not [p for p in collect(probe=True).problems if unserved in p]


def test_a_read_that_finds_its_group_gone_says_redis_lost_data(redis_client) -> None:
    """The loss met outside a blocking read (between two of them): the read
    that makes the group again calls ``lost``, as an ended wait does, so the
    heartbeat is written again then too, not a beat later."""
    from django_delayq.store import streams
    from django_delayq.store.keys import shard_keys

    bands = shard_keys("delayq", "default", 0).ready_bands
    streams.ensure_groups(redis_client, list(bands))
    calls: list[str] = []
    assert (
        streams.read_bands(
            redis_client, "w1", [bands], count=10, lost=lambda: calls.append("read")
        )
        == []
    )
    assert calls == []  # nothing was lost yet
    redis_client.flushall()
    assert (
        streams.read_bands(
            redis_client, "w1", [bands], count=10, lost=lambda: calls.append("read")
        )
        == []
    )
    assert calls == ["read"]
    # The group is back: the next read finds it.
    streams.read_bands(
        redis_client, "w1", [bands], count=10, lost=lambda: calls.append("again")
    )
    assert calls == ["read"]
