"""Keys of ours that no django-delayq process could have written (set by hand,
or left by a bug): the damage stays with that key, is logged, and is repaired.
"""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command

from django_delayq import schedule
from django_delayq.dispatcher import Dispatcher
from django_delayq.models import Status
from django_delayq.store.keys import shard_keys, sweeper_lock_key
from django_delayq.worker import Worker
from tests.support.helpers import drain, refresh
from tests.testapp.tasks import add, order_cancel
from tools.procs import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = shard_keys("delayq", "default", 0)


def write(redis_client, key: str, kind: str) -> None:
    if kind == "string without a TTL":
        redis_client.set(key, "someone")
    else:
        redis_client.rpush(key, "not", "a", "lease")


@pytest.mark.parametrize("kind", ["string without a TTL", "list"])
def test_a_shard_lease_that_would_never_expire_is_replaced(redis_client, kind, caplog):
    task = schedule(add, args=[1, 2])
    write(redis_client, KEYS.lease, kind)
    drain()
    assert refresh(task).status == Status.SUCCEEDED
    assert f"lease {KEYS.lease} was not a lease" in caplog.text
    # A dispatcher's own lease expires again (and was handed back).
    assert not redis_client.exists(KEYS.lease)


def test_a_lease_another_dispatcher_holds_is_still_respected(redis_client):
    task = schedule(add, args=[1, 2])
    redis_client.set(KEYS.lease, "a-live-dispatcher", px=60_000)
    drain()
    assert refresh(task).status == Status.SCHEDULED
    assert redis_client.get(KEYS.lease) == b"a-live-dispatcher"


@pytest.mark.parametrize("kind", ["string without a TTL", "list"])
def test_a_sweep_lock_that_would_never_expire_is_replaced(
    redis_client, kind, capsys, caplog
):
    lock = sweeper_lock_key("delayq")
    write(redis_client, lock, kind)
    call_command("delayq_sweep", once=True)
    assert "skipped" not in capsys.readouterr().out
    assert f"lease {lock} was not a lease" in caplog.text
    assert not redis_client.exists(lock)


BROKEN = shard_keys("delayq", "orders", 1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("which", ["due", "ready", "ready_hi", "ready_lo", "wake"])
def test_a_shard_key_of_the_wrong_type_stops_only_that_shard(
    redis_client, which, caplog
):
    # The running loops, not one --once pass (which must report any error).
    redis_client.set(getattr(BROKEN, which), "not what it should be")
    dispatcher, worker = Dispatcher(), Worker()
    threads = [threading.Thread(target=loop.run) for loop in (dispatcher, worker)]
    for thread in threads:
        thread.start()
    try:
        task = schedule(add, args=[1, 2], delay=0.2)
        wait_for(
            lambda: refresh(task).status == Status.SUCCEEDED,
            20,
            "the default queue's task ran",
        )
    finally:
        dispatcher.stop()
        worker.stop()
        for thread in threads:
            thread.join(timeout=20)
    assert not any(thread.is_alive() for thread in threads)
    assert getattr(BROKEN, which) in caplog.text


@pytest.mark.parametrize("which", ["due", "ready", "ready_lo", "wake", "dead"])
def test_the_sweeper_replaces_a_shard_key_of_the_wrong_type(
    redis_client, which, capsys, caplog
):
    key = getattr(BROKEN, which)
    redis_client.set(key, "not what it should be")
    # A task of the broken shard: indexed when scheduled, or not (the
    # due-set could not take it: the outbox has it).
    task = schedule(order_cancel, args=[7])
    while task.shard != BROKEN.shard:
        task = schedule(order_cancel, args=[7])
    call_command("delayq_sweep", once=True)
    assert "replaced 1" in capsys.readouterr().out
    assert f"Redis key {key} should be a" in caplog.text
    assert redis_client.type(key) in (b"none", redis_client.type(BROKEN.due))
    drain()
    assert refresh(task).status == Status.SUCCEEDED


def test_an_owner_key_that_is_not_a_fingerprint_is_replaced(redis_client, caplog):
    redis_client.rpush("delayq:owner", "not", "a", "fingerprint")
    task = schedule(add, args=[1, 2])
    drain()
    assert refresh(task).status == Status.SUCCEEDED
    assert "Redis key delayq:owner should be a string but held a list" in caplog.text
