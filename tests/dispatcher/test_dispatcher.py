"""The dispatcher moves due ids, and only due ids, to the ready streams."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from django_delayq import schedule
from django_delayq.dispatcher import Dispatcher
from django_delayq.store.keys import decode_member, shard_keys
from tests.support.helpers import due_members, expected_score
from tests.testapp.tasks import add, order_cancel
from tools.procs import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def ready_entries(client: redis.Redis) -> dict[uuid.UUID, int]:
    """Every ready-stream entry as task id -> the entry's Redis time (ms)."""
    found = {}
    for key in client.scan_iter(match="delayq:*:ready"):
        for entry_id, fields in client.xrange(key):
            found[decode_member(fields[b"id"])] = int(entry_id.split(b"-")[0])
    return found


def wait_owning(dispatcher: Dispatcher, shards: int, who: str) -> None:
    """Wait until ``dispatcher`` owns ``shards`` shards."""
    wait_for(
        lambda: sum(s.owned for s in dispatcher.shards) == shards,
        10,
        f"{who} owning {shards} shards",
        poll=0.01,
    )


@pytest.fixture
def running() -> Iterator[Callable[..., Dispatcher]]:
    """Start dispatchers in threads; stop them all at the end of the test."""
    started: list[tuple[Dispatcher, threading.Thread]] = []

    def start(**options: object) -> Dispatcher:
        dispatcher = Dispatcher(**options)  # type: ignore[arg-type]
        thread = threading.Thread(target=dispatcher.run, daemon=True)
        thread.start()
        started.append((dispatcher, thread))
        return dispatcher

    yield start
    for dispatcher, thread in started:
        dispatcher.stop()
        thread.join(timeout=10)
        assert not thread.is_alive(), "a dispatcher still runs:\n" + stacks()


def test_once_moves_the_due_ids_and_leaves_the_rest(redis_client):
    due = [schedule(order_cancel, args=[i]) for i in range(3)]
    later = [schedule(order_cancel, args=[i], delay=3600) for i in range(2)]
    stats = Dispatcher().run(once=True)
    assert stats.moved == 3
    assert set(ready_entries(redis_client)) == {task.pk for task in due}
    assert due_members(redis_client) == {t.pk: expected_score(t) for t in later}
    # The leases were handed back.
    assert not list(redis_client.scan_iter(match="delayq:*:lease"))


def test_large_backlogs_move_in_batches(redis_client):
    tasks = [schedule(add, args=[i, i]) for i in range(25)]
    stats = Dispatcher(queues=["default"], batch_size=10).run(once=True)
    assert stats.moved == 25
    assert stats.batches == 3
    assert set(ready_entries(redis_client)) == {task.pk for task in tasks}


def test_a_task_is_moved_when_due_and_never_before(redis_client, running):
    running(queues=["default"])
    task = schedule(add, args=[1, 1], delay=0.3)
    wait_for(
        lambda: task.pk in ready_entries(redis_client),
        10,
        "the task in a ready stream",
        poll=0.01,
    )
    # The entry id carries Redis' clock at the move: never before the due time.
    assert ready_entries(redis_client)[task.pk] >= expected_score(task)
    assert due_members(redis_client) == {}


def test_a_new_earliest_task_wakes_a_sleeping_dispatcher(redis_client, running):
    # Nothing is due, and the backstop is far away: only a wake-up can help.
    running(queues=["default"], max_wait=60.0)
    schedule(add, args=[0, 0], delay=3600)
    time.sleep(0.2)  # let it go to sleep until the far head
    task = schedule(add, args=[1, 1], delay=0.1)
    wait_for(
        lambda: task.pk in ready_entries(redis_client),
        5,
        "the task in a ready stream",
        poll=0.01,
    )


def test_two_dispatchers_share_the_shards(redis_client, running):
    first = running(queues=["orders"], lease_ttl=1.0)
    wait_owning(first, 4, "the first dispatcher")
    second = running(queues=["orders"], lease_ttl=1.0)
    wait_owning(second, 2, "the second dispatcher")
    wait_owning(first, 2, "the first dispatcher")
    owners = {s.label for s in first.shards if s.owned}
    owners |= {s.label for s in second.shards if s.owned}
    assert owners == {f"orders:{n}" for n in range(4)}

    tasks = [schedule(order_cancel, args=[i]) for i in range(40)]
    wait_for(
        lambda: set(ready_entries(redis_client)) == {t.pk for t in tasks},
        10,
        "every task in a ready stream",
        poll=0.01,
    )
    assert first.stats.moved + second.stats.moved == 40


def test_a_stopped_dispatchers_shards_are_taken_over(redis_client, running):
    first = running(queues=["orders"], lease_ttl=1.0)
    second = running(queues=["orders"], lease_ttl=1.0)
    wait_owning(second, 2, "the second dispatcher")
    first.stop()
    wait_owning(second, 4, "the second dispatcher")


def test_a_stopping_dispatcher_hands_its_shards_over_at_once(redis_client, running):
    """Leases checked only every 60 s: the waiting dispatcher takes the
    shards when the first one stops, not at its next check (a rolling
    restart must not leave the shards undrained for a lease period)."""
    first = running(queues=["orders"], lease_ttl=120.0)
    wait_owning(first, 4, "the first dispatcher")
    second = running(queues=["orders"], lease_ttl=120.0)
    wait_for(
        lambda: second.leases._checks >= 1,
        10,
        "the second dispatcher's first lease check",
        poll=0.01,
    )
    assert not any(s.owned for s in second.shards)  # all held by the first

    first.stop()
    wait_owning(second, 4, "the second dispatcher")
    tasks = [schedule(order_cancel, args=[i]) for i in range(8)]
    wait_for(
        lambda: set(ready_entries(redis_client)) == {t.pk for t in tasks},
        10,
        "every task moved by the second dispatcher",
        poll=0.01,
    )
    assert second.stats.moved == 8


def test_a_standby_dispatcher_stops_at_once_and_takes_no_handover(
    redis_client, running
):
    """A dispatcher without shards that stops ends its handover read at
    once, so that a handover meant for a live dispatcher reaches it."""
    owner = running(queues=["orders"], lease_ttl=120.0)
    wait_owning(owner, 4, "the first dispatcher")
    standby = Dispatcher(queues=["orders"], lease_ttl=120.0)
    thread = threading.Thread(target=standby.run, daemon=True)
    thread.start()
    wait_for(lambda: standby.leases._checks >= 1, 10, "the standby's lease check")
    standby.stop()
    thread.join(timeout=10)
    assert not thread.is_alive(), "the standby still runs:\n" + stacks()
    handover_thread = standby._listener._handover_thread
    assert handover_thread is not None
    assert not handover_thread.is_alive()

    successor = running(queues=["orders"], lease_ttl=120.0)
    wait_for(lambda: successor.leases._checks >= 1, 10, "the successor's check")
    owner.stop()
    wait_owning(successor, 4, "the successor")


def test_a_dispatcher_whose_lease_was_taken_moves_nothing(redis_client):
    dispatcher = Dispatcher(queues=["default"], lease_ttl=30.0)
    client = redis.Redis(connection_pool=redis_client.connection_pool)
    dispatcher.leases.keep(client)
    [shard] = dispatcher.shards
    assert shard.owned
    # Another dispatcher now holds the lease (ours expired while we paused).
    redis_client.set(shard_keys("delayq", "default", 0).lease, "someone-else")
    schedule(add, args=[1, 1])
    dispatcher._drain(client)
    assert not shard.owned
    assert dispatcher.stats.moved == 0
    assert ready_entries(redis_client) == {}


def stacks() -> str:
    """Where every thread of this process is: what a stop that did not
    return waits for."""
    import sys
    import traceback

    names = {thread.ident: thread.name for thread in threading.enumerate()}
    return "\n".join(
        f"--- {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame))
        for ident, frame in sys._current_frames().items()
    )
