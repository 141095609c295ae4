"""I1/I7 when Redis fails: down during schedule(), flushed or restarted empty
mid-drain, or rolled back to an older snapshot. The sweeper repairs all."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from django_delayq import cancel
from django_delayq.models import DelayedTask, OutboxEntry, Status
from django_delayq.store.keys import decode_member
from tests.faults.harness import (
    REDIS_LOSSES,
    SWEEP_INTERVAL,
    Proc,
    Rig,
    schedule_records,
    sweep_totals,
)
from tests.faults.invariants import Expect, check
from tests.testapp.models import Ledger
from tools.procs import wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]


def start_all(rig: Rig, workers: int = 2) -> list[Proc]:
    """Sweeper, dispatcher and workers, ready; the sweeper first in the list."""
    procs = [rig.sweeper(), rig.dispatcher()]
    procs += [rig.worker() for _ in range(workers)]
    rig.wait_ready(*procs)
    return procs


def test_redis_down_during_schedule_then_back_empty(rig: Rig) -> None:
    sweeper = start_all(rig)[0]
    batch = schedule_records("before", 20, delay=lambda i: 1.0 + i * 0.05)

    rig.redis.stop()
    outage = time.monotonic()
    started = time.monotonic()
    during = schedule_records("during", 20, delay=lambda i: (i % 4) * 0.5)
    per_call = (time.monotonic() - started) / 22  # 20 committed + 2 rolled back
    # Every committed task went to the outbox; the rolled-back ones left nothing.
    outboxed = set(OutboxEntry.objects.values_list("task_id", flat=True))
    assert outboxed == {t.pk for t in during.committed.values()}
    time.sleep(1.0)  # the commands notice Redis is gone
    rig.redis.start()  # without persistence: the "before" tasks are gone too
    outage = time.monotonic() - outage
    batch += during
    batch += schedule_records("after", 20, delay=lambda i: 0.2)

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        max_lateness=outage + SWEEP_INTERVAL + 4.0,
    )
    check(
        rig,
        "redis down during schedule(), back empty",
        expect,
        notes=lambda: (
            f"outage {outage:.1f} s, schedule() took {per_call * 1000:.0f} ms "
            f"per call while Redis was down; {sweep_totals(sweeper)}"
        ),
    )
    assert per_call < 0.5, "schedule() held the caller up while Redis was down"


def test_redis_frozen_during_schedule(rig: Rig) -> None:
    """SIGSTOP the redis-server: connections hang instead of failing.
    schedule() waits at most REDIS_TIMEOUT, then uses the outbox; every
    process carries on once Redis answers again."""
    sweeper = start_all(rig)[0]
    batch = schedule_records("before", 20, delay=lambda i: 0.5 + i * 0.05)
    assert rig.redis.pid is not None
    frozen = time.monotonic()
    os.kill(rig.redis.pid, signal.SIGSTOP)
    try:
        slowest = 0.0
        for i in range(30):
            started = time.monotonic()
            batch += schedule_records(
                f"frozen-{i}", 1, delay=lambda i: 0.2, rollback_every=0
            )
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.03)
    finally:
        os.kill(rig.redis.pid, signal.SIGCONT)
    frozen = time.monotonic() - frozen
    batch += schedule_records("after", 20, delay=lambda i: 0.2)

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        # A freeze longer than the visibility timeout lets workers reclaim
        # entries whose heartbeats could not get through.
        max_extra=4 if frozen > 2 else 0,
        max_lateness=frozen + SWEEP_INTERVAL + 4.0,
    )
    check(
        rig,
        "redis frozen (SIGSTOP) during schedule()",
        expect,
        notes=lambda: (
            f"frozen {frozen:.1f} s, slowest schedule() {slowest * 1000:.0f} ms; "
            f"{sweep_totals(sweeper)}"
        ),
    )
    # REDIS_TIMEOUT is 0.25 s: no call waits much longer than one timeout.
    assert slowest < 0.6, f"schedule() held the caller up {slowest:.2f} s"


@pytest.mark.parametrize(("fault", "inject"), REDIS_LOSSES)
def test_redis_loses_everything_mid_drain(
    rig: Rig, fault: str, inject: Callable[[Rig], None]
) -> None:
    sweeper = start_all(rig)[0]
    batch = schedule_records("drain", 300, delay=lambda i: 0.5 + i * 0.01, seconds=0.01)
    total = len(batch.committed)
    wait_for(lambda: Ledger.objects.count() >= total // 3, 60, "a third has run")
    ran_before = Ledger.objects.count()
    indexed = sum(rig.client.zcard(keys.due) for keys in rig.shards())
    inject(rig)
    assert ran_before < total, "the fault came after the drain"
    assert indexed > 0, "the due-sets were empty at the fault"

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        # Only tasks in the workers' hands (2 workers x 2 threads) when Redis
        # lost their stream entries may run again.
        max_extra=4,
        max_lateness=SWEEP_INTERVAL + 8.0,
    )
    check(
        rig,
        f"{fault} mid-drain",
        expect,
        notes=lambda: (
            f"{indexed} ids lost from the due-sets, {total - ran_before} "
            f"tasks left; {sweep_totals(sweeper)}"
        ),
    )


def test_redis_restored_from_an_older_snapshot(make_rig: Callable[..., Rig]) -> None:
    """SAVE, keep going (tasks finish, some are cancelled, new ones come), then
    Redis crashes and comes back with the old snapshot: ghosts of finished and
    cancelled tasks are back in the due-sets and streams, new tasks are gone."""
    rig = make_rig(persistence=True)
    procs = start_all(rig)
    sweeper = procs[0]
    batch = schedule_records("early", 20, delay=lambda i: i * 0.02)
    # The snapshot is taken once the early tasks are done and while the slow
    # ones run. Each is waited for on its own: a slow task claimed in one
    # group with early ones would hold their commit (and, on SQLite, every
    # other worker's writes) for its whole run, so the slow ones are
    # scheduled only once the early ones are done.
    wait_for(
        lambda: Ledger.objects.filter(key__startswith="early-").count() == 20,
        30,
        "early tasks done",
    )
    batch += schedule_records("slow", 2, seconds=3.0, rollback_every=0)
    slow = [batch.committed["slow-0"], batch.committed["slow-1"]]
    wait_for(
        lambda: (
            DelayedTask.objects.filter(
                pk__in=[t.pk for t in slow], status=Status.RUNNING
            ).count()
            == 2
        ),
        10,
        "slow tasks running",
    )
    # Scheduled once the slow ones run, so that however long they took to
    # start, the ghosts are still waiting in the due-sets at the snapshot.
    batch += schedule_records(
        "ghost", 40, delay=lambda i: 4.0 + i * 0.01, rollback_every=0
    )
    assert not Ledger.objects.filter(key__startswith="ghost-").exists(), (
        "ghosts ran before the snapshot: the machine is too slow for this scenario"
    )
    rig.client.save()
    cancelled = {f"ghost-{i}" for i in range(0, 40, 4)}
    for key in cancelled:
        assert cancel(batch.committed[key])
    late = schedule_records("missing", 20, delay=lambda i: 5.0 + i * 0.01)
    batch += late

    ghosts = {k for k in batch.committed if k.startswith(("ghost-", "slow-"))}
    wait_for(
        lambda: (
            Ledger.objects.filter(key__in=ghosts).count()
            == len(ghosts) - len(cancelled)
        ),
        60,
        "the snapshot's tasks finished",
    )
    # Freeze the sweeper and the dispatcher while Redis comes back, to see
    # what the snapshot brought back before they repair or move it.
    frozen = [p for p in procs if p.command != "delayq_worker"]
    for proc in frozen:
        rig.pause(proc)
    try:
        rig.redis.kill()
        rig.redis.start()  # loads the snapshot taken by SAVE
        pending = sum(
            rig.client.xpending(k.ready, "workers")["pending"] for k in rig.shards()
        )
        back = {
            decode_member(member)
            for keys in rig.shards()
            for member in rig.client.zrange(keys.due, 0, -1)
        }
    finally:
        for proc in frozen:
            rig.resume(proc)
    ghost_ids = {batch.committed[k].pk for k in ghosts}
    missing_ids = {t.pk for t in late.committed.values()}
    assert back & ghost_ids, "the snapshot brought no ghosts back"
    assert not back & missing_ids

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        cancelled=cancelled,
        max_lateness=SWEEP_INTERVAL + 6.0,
    )
    check(
        rig,
        "redis restored from an older RDB snapshot",
        expect,
        notes=lambda: (
            f"{len(back & ghost_ids)} ghost members ({len(cancelled)} "
            f"of cancelled tasks), {pending} ghost pending entries, "
            f"{len(missing_ids)} members missing; {sweep_totals(sweeper)}"
        ),
    )
