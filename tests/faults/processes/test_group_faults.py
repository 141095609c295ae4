"""Faults while workers run tasks in groups (one claim, one transaction with a
savepoint per task, one fenced success statement, one commit per group).

Every scenario schedules many small ``record`` tasks due together, so that
the workers really run groups: the tasks of one group share the moment their
success was recorded (``finished_at``), which is how each scenario shows in
its summary line how many tasks ran in groups.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import redis

from django_delayq import schedule
from django_delayq.models import DelayedTask, Status
from django_delayq.store.keys import decode_member
from django_delayq.store.streams import GROUP
from django_delayq.transitions import claimed_in_batch, delivery_of
from tests.faults.harness import (
    Batch,
    Proc,
    Rig,
    grep,
    schedule_bulk,
)
from tests.faults.invariants import Expect, check
from tests.faults.stores.test_database_faults import (  # noqa: F401
    db_server,
    terminate_backends,
)
from tests.testapp.models import Ledger
from tests.testapp.tasks import gated_record, poison, record
from tools.procs import wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
]


def burst(
    prefix: str,
    count: int,
    *,
    start: float = 0.5,
    spread: float = 1.0,
    seconds: float = 0.0,
) -> Batch:
    """``count`` record tasks due within ``spread`` seconds from ``start`` on,
    each running for ``seconds``."""
    return schedule_bulk(
        prefix, count, delay=lambda i: start + spread * i / count, seconds=seconds
    )


def running() -> int:
    return DelayedTask.objects.filter(status=Status.RUNNING).count()


def groups() -> str:
    """How many succeeded record tasks committed in groups, and the largest."""
    moments = Counter(
        DelayedTask.objects.filter(
            name=record.name, status=Status.SUCCEEDED
        ).values_list("finished_at", flat=True)
    )
    sizes = [n for n in moments.values() if n > 1]
    return (
        f"{sum(sizes)} of {sum(moments.values())} committed in {len(sizes)} "
        f"groups (largest {max(sizes, default=0)})"
    )


def claimed_by(rig: Rig, proc: Proc) -> set[uuid.UUID]:
    """Tasks ``proc`` has claimed and not finished: running rows whose
    stream entries are pending with one of its consumers."""
    entries: dict[uuid.UUID, str] = {}
    marker = f":{proc.pid}:"
    for keys in rig.shards():
        try:
            pending = rig.client.xpending_range(
                keys.ready, GROUP, min="-", max="+", count=10000
            )
        except redis.ResponseError:
            continue  # no group yet
        ids = [e["message_id"] for e in pending if marker in e["consumer"].decode()]
        if not ids:
            continue
        pipe = rig.client.pipeline(transaction=False)
        for entry_id in ids:
            pipe.xrange(keys.ready, min=entry_id, max=entry_id)
        for found in pipe.execute():
            for entry_id, fields in found:
                try:
                    entries[decode_member(fields[b"id"])] = entry_id.decode()
                except (KeyError, ValueError):
                    continue
    if not entries:
        return set()
    rows = DelayedTask.objects.filter(pk__in=list(entries), status=Status.RUNNING)
    return {
        pk
        for pk, claim_entry in rows.values_list("pk", "claim_entry")
        if entries[pk] == delivery_of(claim_entry)
    }


def test_workers_killed_mid_group_lose_nothing_and_double_nothing(rig: Rig) -> None:
    """SIGKILL workers while they hold claimed, uncommitted groups, again and
    again during a burst; replacements and the others finish everything. Only
    the killed groups' tasks run again, each takes effect once, and a task
    claimed in a batch is not charged an attempt for the kill."""
    procs = [rig.sweeper(), rig.dispatcher()]
    workers = [rig.worker(label=f"w{n}") for n in range(3)]
    rig.wait_ready(*procs, *workers)
    # Each task takes a few milliseconds, so that a group stays claimed and
    # uncommitted long enough for a kill to land inside it: instant tasks
    # commit a whole group in about a millisecond.
    batch = burst("kill", 600, seconds=0.004)

    kills, hits = 0, []
    #: task -> its attempts when the worker holding it in a batch was killed
    batch_attempts: dict[uuid.UUID, int] = {}
    deadline = time.monotonic() + 20
    # Until three kills hit a claimed group, one of them a batch (a group's
    # tasks may also be claimed one by one, when held until their run_at).
    while (sum(1 for n in hits if n) < 3 or not batch_attempts) and (
        time.monotonic() < deadline
    ):
        victim = workers[kills % len(workers)]
        try:
            wait_for(lambda v=victim: claimed_by(rig, v), 5, "a claimed group")
        except AssertionError:
            break  # the burst is over
        rig.kill(victim)
        kills += 1
        # What the dead worker had claimed and not committed: those tasks,
        # and only those, run a second time.
        held = claimed_by(rig, victim)
        hits.append(len(held))
        for row in DelayedTask.objects.filter(pk__in=held):
            if claimed_in_batch(row):
                batch_attempts[row.pk] = row.attempts
        workers[workers.index(victim)] = rig.worker(label=f"w{len(rig.procs)}")
    caught = sum(hits)
    assert caught, f"no kill hit a claimed group ({kills} kills)"

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        max_extra=caught,
        max_lateness=60.0,
    )
    check(
        rig,
        f"workers SIGKILLed mid-group ({kills} times)",
        expect,
        notes=lambda: (
            f"{caught} claimed tasks in the killed groups ({hits}); {groups()}"
        ),
    )
    # Nothing says which task of a batch its worker was running when it
    # died: they all ran again, alone, as the same attempt (I8).
    final = dict(
        DelayedTask.objects.filter(pk__in=batch_attempts).values_list("pk", "attempts")
    )
    assert batch_attempts, f"no kill hit a batch ({hits})"
    assert final == batch_attempts, "a batch was charged for its worker's death"


def test_a_group_paused_past_its_visibility_timeout_is_fenced(
    rig: Rig, tmp_path: Path
) -> None:
    """SIGSTOP a worker inside a group until another worker has taken every
    task of it over, then SIGCONT it: the whole group rolls back, each task
    is fenced on its own, and every effect stays the fresh worker's, once."""
    gate = tmp_path / "gate"
    gate.touch()
    procs = [rig.sweeper(), rig.dispatcher()]
    rig.wait_ready(*procs)
    # Every task of the group waits on the gate before it writes: the worker
    # is then inside the group, with nothing written, for as long as the
    # scenario wants. (Not one gated task among plain ones: which task comes
    # first is not ours to choose, and on SQLite a paused transaction that
    # wrote holds the only write lock, which would stop every other worker;
    # on PostgreSQL a plain task seen to outlast the group's budget would run
    # its neighbours alone.)
    batch = Batch()
    for i in range(8):
        key = f"paused-{i}"
        batch.committed[key] = schedule(gated_record, args=[key, str(gate)])
    waiting = {task.pk for task in batch.committed.values()}
    # All of them in the ready streams before the worker starts: its first
    # read takes them all, and claims them in one statement, as one group.
    wait_for(
        lambda: sum(rig.client.xlen(keys.ready) for keys in rig.shards()) == 8,
        30,
        "the tasks ready",
    )
    stale = rig.worker(concurrency=1, label="stale")
    rig.wait_ready(stale)
    wait_for(lambda: waiting <= claimed_by(rig, stale), 30, "the gated tasks claimed")
    rig.pause(stale)
    paused = time.monotonic()
    # The group the stale worker is inside: what it claimed and holds.
    group = claimed_by(rig, stale)
    assert len(group) > 1, f"the paused worker holds {len(group)} task(s)"
    gate.unlink()
    fresh = rig.worker(label="fresh")
    batch += burst("meanwhile", 200)

    def taken_over() -> bool:
        # Taken over from a batch's claim: run again alone, with no attempt
        # counted for the batch that never finished, and claimed by the
        # delivery alone (no batch mark), which fences the stale worker.
        rows = DelayedTask.objects.filter(
            pk__in=group, attempts=1, status=Status.SUCCEEDED
        ).values_list("claim_entry", flat=True)
        return len([e for e in rows if e == delivery_of(e)]) == len(group)

    wait_for(taken_over, 30, "the fresh worker took the whole group over")
    paused = time.monotonic() - paused
    rig.resume(stale)
    wait_for(
        lambda: len(grep([stale], "its completion was discarded")) == len(group),
        30,
        "the stale worker's completions were all discarded",
    )
    fenced_groups = grep([stale], "was fenced")

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        max_extra=len(group),
        max_lateness=60.0,
    )
    report = check(
        rig,
        "a worker SIGSTOPped mid-group past the visibility timeout, then SIGCONTed",
        expect,
        notes=lambda: f"paused {paused:.1f} s; {groups()}",
    )
    # The stale batch's attempts were never counted: the takeover ran each
    # task as the same attempt, and the stale completions were discarded.
    assert report.extra == 0
    assert fenced_groups, "the stale worker's group was never fenced"
    for pk in group:
        row = DelayedTask.objects.get(pk=pk)
        [run] = Ledger.objects.filter(key=row.args[0])
        assert (row.status, row.attempts, run.pid) == (
            Status.SUCCEEDED,
            1,
            fresh.pid,
        ), (
            f"{row.args[0]}: {row.status} attempts={row.attempts}, committed by "
            f"pid {run.pid} (stale {stale.pid}, fresh {fresh.pid})"
        )


def test_database_sessions_terminated_while_groups_commit(
    rig: Rig,
    db_server: object,  # noqa: F811
) -> None:
    """End every worker's database session, three times, while groups
    run and commit: a group is all or nothing, and its tasks run again once."""
    procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(*procs)
    tasks = 600
    batch = burst("db", tasks)
    wait_for(lambda: Ledger.objects.count() >= tasks // 5, 30, "a fifth has run")
    terminated = held = 0
    left = tasks - Ledger.objects.count()
    for _ in range(3):
        terminated += terminate_backends()
        # Rows claimed by a group that was cut short stay running until their
        # entries are tried again: only they may run a second time.
        held += running()
        time.sleep(0.25)
    assert terminated, "no session to terminate"
    assert left > 0, "the fault did not hit mid-burst"

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        max_extra=held,
        max_lateness=60.0,
    )
    check(
        rig,
        "database sessions terminated while groups commit (3 rounds)",
        expect,
        notes=lambda: (
            f"{terminated} sessions terminated, {left} tasks left at the first, "
            f"{held} claimed at the terminations; {groups()}"
        ),
    )


def test_a_task_raising_in_a_group_costs_its_neighbours_nothing(rig: Rig) -> None:
    """Poison tasks scattered through a burst: each one's savepoint rolls
    back its own ledger row, its neighbours' effects all commit once, and it
    fails after its attempts."""
    procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(*procs)
    count, poisoned = 400, 20
    batch = burst("healthy", count)
    doomed = [
        schedule(poison, args=[f"poison-{i}"], delay=0.5 + i / poisoned)
        for i in range(poisoned)
    ]

    expect = Expect(committed=batch.keys, rolled_back=batch.rolled_back)
    check(
        rig,
        "tasks raising inside groups",
        expect,
        notes=lambda: f"{poisoned} poison tasks among {count}; {groups()}",
    )
    rows = DelayedTask.objects.filter(pk__in=[t.pk for t in doomed])
    assert {(r.status, r.attempts) for r in rows} == {(Status.FAILED, 3)}
    assert not Ledger.objects.filter(key__startswith="poison-").exists()


def test_a_killed_group_charges_only_the_task_it_was_running(
    rig: Rig, tmp_path: Path
) -> None:
    """SIGKILL a worker inside the first task of a group of one-attempt
    tasks: that task may fail ("worker lost"), the others never started and
    must run, once each."""
    gate = tmp_path / "gate"
    gate.touch()
    procs = [rig.sweeper(), rig.dispatcher()]
    rig.wait_ready(*procs)
    tasks = [
        schedule(gated_record, args=[f"once-{i}", str(gate)], max_attempts=1)
        for i in range(8)
    ]
    wait_for(
        lambda: sum(rig.client.xlen(keys.ready) for keys in rig.shards()) == 8,
        30,
        "the tasks ready",
    )
    victim = rig.worker(concurrency=1, label="victim")
    rig.wait_ready(victim)
    pks = {task.pk for task in tasks}
    wait_for(lambda: pks <= claimed_by(rig, victim), 30, "the group claimed")
    rig.kill(victim)
    gate.unlink()
    rig.wait_ready(rig.worker(label="fresh"))
    wait_for(
        lambda: (
            not DelayedTask.objects.filter(
                pk__in=pks, status__in=[Status.SCHEDULED, Status.RUNNING]
            ).exists()
        ),
        30,
        "every task finished",
    )
    rows = DelayedTask.objects.filter(pk__in=pks)
    failed = [(r.args[0], r.last_error) for r in rows if r.status == Status.FAILED]
    assert len(failed) <= 1, f"never-started tasks failed: {failed}"
    runs = Counter(Ledger.objects.values_list("key", flat=True))
    assert all(n == 1 for n in runs.values()), runs
