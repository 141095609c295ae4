from __future__ import annotations

import time
import uuid

from django_delayq.ids import shard_of, uuid7
from django_delayq.store.keys import decode_member, encode_member, shard_keys


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
