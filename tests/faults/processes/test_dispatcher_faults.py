"""Dispatchers SIGKILLed at any instruction during a large drain, alone and
two at once: the Lua move is atomic and leases pass on, so nothing is lost
and nothing runs twice."""

from __future__ import annotations

import random
import time

import pytest

from tests.faults.harness import LEASE_TTL, Proc, Rig, schedule_bulk, schedule_records
from tests.faults.invariants import Expect, check

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
]

TASKS = 10_000
#: The tasks fall due evenly over this many seconds.
SPREAD = 8.0


def test_dispatchers_killed_repeatedly_during_a_10000_task_drain(rig: Rig) -> None:
    """First one dispatcher, SIGKILLed and restarted again and again (its
    successor waits for the dead one's leases to expire); then two at once,
    one of them SIGKILLed and restarted in turn."""
    # The sweeper is not needed to repair anything here; it runs (less often
    # than elsewhere: each pass reads every scheduled row) to show it does
    # not make a big drain run anything twice.
    procs = [rig.sweeper(interval=5), rig.worker(), rig.worker()]
    dispatchers = [rig.dispatcher(label="dispatch-a")]
    rig.wait_ready(*procs, *dispatchers)
    batch = schedule_bulk("bulk", TASKS, delay=lambda i: 0.5 + SPREAD * i / TASKS)
    start = time.monotonic()
    rng = random.Random(1)

    def backlog() -> int:
        return sum(rig.client.zcard(keys.due) for keys in rig.shards())

    kills: list[tuple[str, int]] = []  # (label, due-set backlog at the kill)

    def kill_and_restart(index: int) -> None:
        dead: Proc = dispatchers[index]
        kills.append((dead.label, backlog()))
        rig.kill(dead)
        dispatchers[index] = rig.dispatcher(label=dead.label)

    # One dispatcher, killed over and over.
    while time.monotonic() - start < SPREAD / 2 and len(kills) < 4:
        time.sleep(rng.uniform(0.4, 0.9))
        kill_and_restart(0)
    # Two at once; kill them in turn.
    dispatchers.append(rig.dispatcher(label="dispatch-b"))
    while time.monotonic() - start < SPREAD + 1 and len(kills) < 8:
        time.sleep(rng.uniform(0.4, 0.9))
        kill_and_restart(len(kills) % 2)
    hit = [backlog for _, backlog in kills if backlog > 0]
    assert len(hit) >= 4, f"too few kills while work was due: {kills}"

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        max_extra=0,  # a dispatcher's death never makes a task run again
    )
    check(
        rig,
        f"dispatchers SIGKILLed {len(kills)} times during a {TASKS}-task drain",
        expect,
        drain_seconds=240,
        notes=f"{len(hit)} kills with ids still in the due-sets",
    )


def test_a_dispatcher_paused_past_its_lease_is_fenced(rig: Rig) -> None:
    """SIGSTOP the only dispatcher (it owns every shard) past its lease TTL;
    a new one takes the shards over. When the old one wakes up, its lease
    token no longer matches: it moves nothing and lets the shards go."""
    procs = [rig.sweeper(), rig.worker(), rig.worker()]
    paused = rig.dispatcher(label="dispatch-paused")
    rig.wait_ready(*procs, paused)
    batch = schedule_records("fenced", 300, delay=lambda i: 0.5 + i * 0.02)
    time.sleep(1.0)
    rig.pause(paused)
    successor = rig.dispatcher(label="dispatch-successor")
    time.sleep(3 * float(LEASE_TTL))  # the leases expire and pass on
    rig.resume(paused)

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        max_extra=0,
        max_lateness=3 * float(LEASE_TTL) + 10.0,
    )
    check(
        rig,
        "dispatcher SIGSTOPped past its lease, then SIGCONTed",
        expect,
        notes=lambda: (
            f"the paused one lost {paused.log().count('lost the lease')} leases "
            f"on waking, the successor took "
            f"{successor.log().count('took shard')} shards"
        ),
    )
    assert "lost the lease" in paused.log() or "handed back" in paused.log()
