"""The sweeper itself killed mid-pass: the sweeper that replaces it must
repair what Redis loses within one interval (I1), not wait for the dead
one's lock to expire."""

from __future__ import annotations

import random
import time

import pytest

from django_delayq import Call, schedule_many
from django_delayq.store.keys import encode_member, sweeper_lock_key
from tests.faults.harness import SWEEP_INTERVAL, Rig, schedule_records
from tests.faults.invariants import Expect, check
from tests.testapp.tasks import record

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]


def test_sweeper_killed_mid_pass_is_replaced_within_an_interval(rig: Rig) -> None:
    procs = [rig.dispatcher(), rig.worker()]
    sweeper = rig.sweeper(label="sweep-killed")
    rig.wait_ready(*procs, sweeper)
    # Work for every pass: rows due within the reconcile window, not soon.
    schedule_many([Call(record, args=[f"later-{i}"], delay=300) for i in range(2000)])
    lock = sweeper_lock_key("delayq")
    rng = random.Random(3)
    caught = False
    deadline = time.monotonic() + 30
    tries = 0
    # Freeze the sweeper at random moments until one falls inside a pass
    # (it holds the lock), then SIGKILL it there.
    while not caught and time.monotonic() < deadline and tries < 2000:
        tries += 1
        rig.pause(sweeper)
        if rig.client.get(lock) is not None:
            rig.kill(sweeper)
            caught = True
        else:
            rig.resume(sweeper)
            time.sleep(rng.uniform(0, 0.05))
    assert caught, f"never caught the sweeper inside a pass in {tries} tries"
    killed = time.monotonic()
    replacement = rig.sweeper(label="sweep-replacement")
    rig.wait_ready(replacement)

    # Redis loses tasks (as after a crash between commit and the Redis write).
    batch = schedule_records("lost", 10, delay=lambda i: 0.5, rollback_every=0)
    for task in batch.committed.values():
        for keys in rig.shards():
            rig.client.zrem(keys.due, encode_member(task.pk))

    expect = Expect(
        committed=batch.keys,
        max_lateness=SWEEP_INTERVAL + 4.0,
    )
    started = time.monotonic() - killed

    def notes() -> str:
        skipped = replacement.log().count("skipped")
        return (
            f"caught inside a pass after {tries} tries; the replacement, ready "
            f"{started:.1f} s after the kill, skipped {skipped} passes"
        )

    check(
        rig,
        "sweeper SIGKILLed mid-pass, replaced",
        expect,
        drain_seconds=20,
        notes=notes,
    )
