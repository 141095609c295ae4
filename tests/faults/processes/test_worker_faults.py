"""Workers killed, paused past their visibility timeout, or stopped by
SIGTERM mid-task; and a poison task. The attempt counter fences stale work."""

from __future__ import annotations

import signal
import time

import pytest

from django_delayq import schedule
from django_delayq.models import DelayedTask, Status
from tests.faults.harness import Batch, Rig, grep, schedule_records
from tests.faults.invariants import Expect, check
from tests.testapp.models import Ledger
from tests.testapp.tasks import poison, record
from tools.procs import wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]


def running() -> int:
    return DelayedTask.objects.filter(status=Status.RUNNING).count()


def test_worker_killed_mid_task(rig: Rig) -> None:
    procs = [rig.sweeper(), rig.dispatcher()]
    worker = rig.worker()
    rig.wait_ready(*procs, worker)
    batch = schedule_records("slow", 8, seconds=1.0, delay=lambda i: i * 0.4)
    batch += schedule_records("fast", 40, delay=lambda i: i * 0.1)

    in_flight = 0
    for _ in range(3):
        wait_for(lambda: running() > 0, 30, "a task running")
        rig.kill(worker)
        # Counted once it is dead (and before another worker starts): until
        # then it may claim more, and only its own claims are left running.
        in_flight += running()
        worker = rig.worker()
        rig.wait_ready(worker)

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        # Only a task in the killed worker's hands may run again.
        max_extra=in_flight,
        max_lateness=20.0,
    )
    report = check(
        rig,
        "worker SIGKILLed mid-task (3 times)",
        expect,
        notes=f"{in_flight} tasks in flight at the kills",
    )
    assert report.extra > 0, "no killed task was reclaimed and run again"


def test_worker_paused_past_its_visibility_timeout(rig: Rig) -> None:
    """SIGSTOP a worker running two slow tasks until another worker has taken
    them over, then SIGCONT it: its late completions must be discarded."""
    procs = [rig.sweeper(), rig.dispatcher()]
    stale = rig.worker(label="stale")
    rig.wait_ready(*procs, stale)
    # Two slow tasks: one with attempts to spare, one whose second attempt
    # (the takeover) is its last.
    batch = Batch()
    for key, attempts in (("paused-0", 3), ("paused-1", 2)):
        batch.committed[key] = schedule(
            record, args=[key], kwargs={"seconds": 3.0}, max_attempts=attempts
        )
    slow = list(batch.committed.values())
    wait_for(lambda: running() == 2, 30, "both slow tasks running")
    rig.pause(stale)
    paused = time.monotonic()
    fresh = rig.worker(label="fresh")
    batch += schedule_records("meanwhile", 20, delay=lambda i: 0.5 + i * 0.05)

    def taken_over() -> bool:
        return DelayedTask.objects.filter(
            pk__in=[t.pk for t in slow], attempts__gte=2
        ).count() == len(slow)

    wait_for(taken_over, 30, "the fresh worker took both slow tasks over")
    paused = time.monotonic() - paused
    rig.resume(stale)
    wait_for(
        lambda: len(grep([stale], "its completion was discarded")) == len(slow),
        30,
        "the stale worker's completions were discarded",
    )

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        max_extra=len(slow),
        max_lateness=20.0,
    )
    report = check(
        rig,
        "worker SIGSTOPped past the visibility timeout, then SIGCONTed",
        expect,
        notes=f"paused {paused:.1f} s",
    )
    assert report.extra == len(slow)
    # One takeover each: the fresh worker's run is the one that counts. A
    # stale worker whose completion was discarded must leave the entry the
    # fresh worker holds alone; otherwise the sweeper finds a running row
    # with no entry, schedules it again and a third attempt discards the
    # fresh worker's (successful) second one.
    recovered = grep(procs[:1], "scheduled again")
    for task in slow:
        row = DelayedTask.objects.get(pk=task.pk)
        [run] = Ledger.objects.filter(key=row.args[0])
        assert (row.attempts, run.pid) == (2, fresh.pid), (
            f"{row.args[0]}: attempts={row.attempts}, committed by pid {run.pid} "
            f"(stale {stale.pid}, fresh {fresh.pid}); the sweeper: {recovered}"
        )


def test_sigterm_during_tasks(rig: Rig) -> None:
    """One SIGTERM: the worker finishes what it runs and exits 0. Two: it
    exits at once, and another worker runs its tasks again."""
    procs = [rig.sweeper(), rig.dispatcher()]
    # One task per group: a thread that read both slow tasks at once would
    # otherwise run them one after the other, claimed together, and leave
    # its other thread free to read the second worker's tasks.
    graceful = rig.worker("--group-size", "1", label="graceful")
    rig.wait_ready(*procs, graceful)
    # Two slow tasks for each worker: the second starts once the first has
    # both its threads busy, so it reads no more.
    batch = schedule_records("slow-a", 2, seconds=5.0, rollback_every=0)
    wait_for(lambda: running() == 2, 30, "the first worker running two slow tasks")
    impatient = rig.worker(label="impatient")
    rig.wait_ready(impatient)
    batch += schedule_records("slow-b", 2, seconds=2.0, rollback_every=0)
    batch += schedule_records("fast", 40, delay=lambda i: 0.5 + i * 0.05)
    wait_for(lambda: running() == 4, 30, "both workers running two slow tasks")
    abandoned = rig.in_flight().get(impatient.pid, 0)
    assert abandoned >= 2
    rig.kill(graceful, signal.SIGTERM)
    rig.kill(impatient, signal.SIGTERM)
    wait_for(
        lambda: "finishing what is in flight" in impatient.log(),
        10,
        "the first SIGTERM was handled",
    )
    rig.kill(impatient, signal.SIGTERM)
    assert impatient.popen.wait(timeout=10) == 128 + signal.SIGTERM
    assert graceful.popen.wait(timeout=30) == 0
    rig.wait_ready(rig.worker())

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        max_extra=abandoned,  # what the impatient worker abandoned
        max_lateness=20.0,
    )
    check(
        rig,
        "SIGTERM during tasks (once: graceful; twice: abandon)",
        expect,
        notes=f"{abandoned} entries abandoned",
    )


def test_a_poison_task_fails_after_its_attempts_and_harms_no_other(rig: Rig) -> None:
    procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(*procs)
    poisoned = [schedule(poison, args=[f"poison-{i}"], delay=i * 0.1) for i in range(5)]
    batch = schedule_records("healthy", 100, delay=lambda i: i * 0.02)

    expect = Expect(committed=batch.keys, rolled_back=batch.rolled_back)
    check(
        rig,
        "poison task (always raises)",
        expect,
        notes=f"{len(poisoned)} poison tasks failed after 3 attempts each",
    )
    for task in poisoned:
        row = DelayedTask.objects.get(pk=task.pk)
        assert row.status == Status.FAILED
        assert row.attempts == row.max_attempts == 3
        assert "always fails" in row.last_error
        assert "RuntimeError" in row.last_traceback
