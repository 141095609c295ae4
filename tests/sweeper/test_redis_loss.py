"""Each shard's index marker and the signs of a Redis data loss on a real
Redis: what a move says after a FLUSHALL or a restart, who claims the
rebuild, and what a dispatcher's rebuild puts back (and what it leaves)."""

from __future__ import annotations

import logging

import pytest

from django_delayq import schedule
from django_delayq.dispatcher import Dispatcher
from django_delayq.models import Status
from django_delayq.store import epochs, index
from django_delayq.store.connection import get_client
from django_delayq.store.keys import shard_keys
from django_delayq.sweeper import Sweeper
from tests.support.helpers import due_members, refresh
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = shard_keys("delayq", "default", 0)


def test_a_move_says_the_marker_is_gone_after_a_flushall(redis_client):
    client = get_client("loop")
    assert epochs.claim(client, KEYS, "rebuilder")
    assert epochs.mark_rebuilt(client, KEYS, "rebuilder")
    assert index.move_due(client, KEYS, "dispatcher-1", 10).marked
    redis_client.flushall()
    assert not index.move_due(client, KEYS, "dispatcher-1", 10).marked


def test_a_move_says_the_server_restarted_when_it_had_to_send_the_script(
    redis_client,
):
    client = get_client("loop")
    index.move_due(client, KEYS, "dispatcher-1", 10)
    assert not index.move_due(client, KEYS, "dispatcher-1", 10).reloaded
    # What a restart or a promoted replica looks like to a script: its
    # cache is empty (FLUSHALL keeps it).
    redis_client.flushall()
    assert not index.move_due(client, KEYS, "dispatcher-1", 10).reloaded
    redis_client.script_flush()
    assert index.move_due(client, KEYS, "dispatcher-1", 10).reloaded
    assert not index.move_due(client, KEYS, "dispatcher-1", 10).reloaded


def test_one_process_claims_a_rebuild(redis_client):
    client = get_client("loop")
    assert epochs.claim(client, KEYS, "a")
    assert not epochs.claim(client, KEYS, "b")
    # Another process that saw the same restart leaves a fresh claim alone.
    assert not epochs.claim(client, KEYS, "b", force=True)
    assert not epochs.mark_rebuilt(client, KEYS, "b")
    assert epochs.mark_rebuilt(client, KEYS, "a")
    assert redis_client.ttl(KEYS.epoch) == -1  # rebuilt: kept for ever
    assert not epochs.claim(client, KEYS, "b")


def test_a_claim_whose_claimant_died_expires(redis_client):
    client = get_client("loop")
    assert epochs.claim(client, KEYS, "a")
    assert 0 < redis_client.pttl(KEYS.epoch) <= epochs.CLAIM_MS
    redis_client.delete(KEYS.epoch)  # as its TTL would
    assert epochs.claim(client, KEYS, "b")


def test_a_forced_claim_takes_a_marker_older_than_the_restart(redis_client):
    client = get_client("loop")
    # A marker rebuilt long ago, as an old snapshot or a replica brings back.
    redis_client.set(KEYS.epoch, "rebuilt:1000:an-old-process")
    assert not epochs.claim(client, KEYS, "b")
    assert epochs.claim(client, KEYS, "b", force=True)
    assert epochs.mark_rebuilt(client, KEYS, "b")


def test_a_marker_of_another_type_counts_as_gone(redis_client):
    redis_client.rpush(KEYS.epoch, "not", "a", "marker")
    assert epochs.claim(get_client("loop"), KEYS, "a")


def test_a_dispatcher_rebuilds_the_index_after_a_flushall(redis_client, caplog):
    due = schedule(add, args=[1, 2])
    soon = schedule(add, args=[3, 4], delay=60)
    later = schedule(add, args=[5, 6], delay=86_400)  # past the window
    Dispatcher().run(once=True)
    redis_client.flushall()
    caplog.set_level(logging.INFO, logger="django_delayq")
    Dispatcher().run(once=True)
    assert "rebuilt the index of default:0" in caplog.text
    # Due: moved at once; due soon: indexed again; far off: left to the
    # sweeper's moving window.
    assert refresh(due).status == Status.SCHEDULED
    assert redis_client.xlen(KEYS.ready) == 1
    assert set(due_members(redis_client)) == {soon.pk}
    assert later.pk not in due_members(redis_client)
    assert redis_client.get(KEYS.epoch).startswith(b"rebuilt:")


def test_a_dispatcher_leaves_a_rebuild_another_process_claimed(redis_client):
    schedule(add, args=[1, 2], delay=60)
    Dispatcher().run(once=True)
    redis_client.flushall()
    assert epochs.claim(get_client("loop"), KEYS, "another-dispatcher")
    Dispatcher().run(once=True)
    assert not due_members(redis_client)  # the other one rebuilds it


def test_a_dispatcher_rebuilds_after_a_restart_though_the_marker_is_there(
    redis_client,
):
    soon = schedule(add, args=[1, 2], delay=60)
    Dispatcher().run(once=True)
    redis_client.set(KEYS.epoch, "rebuilt:1000:an-old-process")
    # An old snapshot: the marker is back, the task indexed since is not.
    redis_client.delete(*KEYS.due_bands)
    redis_client.script_flush()
    Dispatcher().run(once=True)
    assert set(due_members(redis_client)) == {soon.pk}


def test_the_sweeper_marks_what_it_rebuilt(redis_client):
    Sweeper().sweep()
    assert redis_client.get(KEYS.epoch).startswith(b"rebuilt:")
    # So a dispatcher has nothing to rebuild after it.
    assert index.move_due(get_client("loop"), KEYS, "dispatcher-1", 10).marked
