from __future__ import annotations

import os
import re
import socket
import time
import uuid

import pytest

from django_delayq.ids import process_name, shard_of, uuid7
from django_delayq.store.keys import (
    band_of,
    decode_member,
    encode_member,
    legacy_member,
    shard_keys,
    split_member,
    stream_rank,
)


def test_uuid7_has_version_7_rfc_variant_and_the_current_time():
    before = time.time_ns() // 1_000_000
    value = uuid7()
    after = time.time_ns() // 1_000_000
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert before <= value.int >> 80 <= after


def test_uuid7_sorts_by_creation_time():
    first = uuid7()
    time.sleep(0.002)
    assert uuid7() > first


def test_shards_are_stable_and_spread_evenly():
    ids = [uuid7() for _ in range(4000)]
    counts = [0] * 4
    for task_id in ids:
        assert shard_of(task_id, 4) == shard_of(task_id, 4)
        counts[shard_of(task_id, 4)] += 1
    assert min(counts) > 800


def test_keys_of_one_shard_share_a_cluster_hash_tag():
    keys = shard_keys("delayq", "orders", 3)
    assert keys.due == "delayq:{orders:3}:due"
    assert keys.ready == "delayq:{orders:3}:ready"
    assert keys.wake == "delayq:{orders:3}:wake"


def test_members_are_the_16_id_bytes():
    task_id = uuid7()
    assert encode_member(task_id) == task_id.bytes
    assert decode_member(encode_member(task_id)) == task_id


def test_members_are_bare_ids_and_legacy_members_still_decode():
    task_id = uuid7()
    assert band_of(0) == b""
    assert band_of(1) == band_of(100) == b"h"
    assert band_of(-1) == band_of(-100) == b"l"
    # The members the release that introduced bands wrote in the normal
    # band's due-set: the id and its band's byte.
    for band in (b"h", b"", b"l"):
        member = legacy_member(task_id, band)
        assert split_member(member) == (task_id, band)
        assert decode_member(member) == task_id
    assert len(legacy_member(task_id, b"h")) == 17
    for bad in (task_id.bytes + b"x", task_id.bytes[:15], task_id.bytes + b"hh"):
        with pytest.raises(ValueError, match="not a task id"):
            decode_member(bad)


def test_each_band_has_its_due_set_in_the_shards_slot():
    keys = shard_keys("delayq", "orders", 3)
    assert keys.due == "delayq:{orders:3}:due"  # the normal band, as before
    assert keys.due_bands == (
        "delayq:{orders:3}:due:hi",
        "delayq:{orders:3}:due",
        "delayq:{orders:3}:due:lo",
    )
    assert [keys.due_of(p) for p in (5, 0, -5)] == list(keys.due_bands)
    task_id = uuid7()
    # Where removing a task looks: every band's due-set, legacy members too.
    assert keys.places(task_id) == [
        ("delayq:{orders:3}:due:hi", task_id.bytes),
        ("delayq:{orders:3}:due", task_id.bytes),
        ("delayq:{orders:3}:due", task_id.bytes + b"h"),
        ("delayq:{orders:3}:due", task_id.bytes + b"l"),
        ("delayq:{orders:3}:due:lo", task_id.bytes),
    ]


def test_each_band_has_its_ready_stream_in_the_shards_slot():
    keys = shard_keys("delayq", "orders", 3)
    assert keys.ready == "delayq:{orders:3}:ready"  # the normal band, as before
    assert keys.ready_bands == (
        "delayq:{orders:3}:ready:hi",
        "delayq:{orders:3}:ready",
        "delayq:{orders:3}:ready:lo",
    )
    assert [keys.ready_of(p) for p in (5, 0, -5)] == list(keys.ready_bands)
    assert [stream_rank(s) for s in keys.ready_bands] == [0, 1, 2]


def test_a_process_name_is_host_pid_and_random_hex_digits():
    host, pid, digits = process_name().split(":")
    assert (host, int(pid)) == (socket.gethostname(), os.getpid())
    assert re.fullmatch(r"[0-9a-f]{6}", digits)
    assert re.fullmatch(r"[0-9a-f]{8}", process_name(random_digits=8).split(":")[2])
    assert process_name() != process_name()
