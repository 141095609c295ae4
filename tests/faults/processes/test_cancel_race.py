"""I6: cancel() racing the dispatcher and the workers, within a few ms of the
due time. Whoever commits first wins: a task whose cancel committed before
its claim never starts, and one whose cancel committed after it is stopped
with nothing of its run committed (cancel() stops a running task); a task
whose cancel lost ran once."""

from __future__ import annotations

import datetime
import random
import time

import pytest
from django.db import DatabaseError
from django.utils import timezone

from django_delayq import cancel, schedule
from tests.faults.harness import Rig
from tests.faults.invariants import Expect, check
from tests.testapp.models import Ledger
from tests.testapp.tasks import record

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]

TRIALS = 200
#: Due times this far apart: each trial's cancel lands alone.
STEP = datetime.timedelta(milliseconds=25)


def test_cancel_racing_dispatch(rig: Rig) -> None:
    procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(*procs)
    rng = random.Random(7)
    first = timezone.now() + datetime.timedelta(seconds=1.5)
    tasks = [
        schedule(record, args=[f"race-{i}"], eta=first + i * STEP)
        for i in range(TRIALS)
    ]
    won: dict[str, datetime.datetime] = {}  # key -> when cancel() returned True
    lost: dict[str, datetime.datetime] = {}
    errors: list[str] = []
    for task in tasks:
        # From 5 ms before the due time to 15 ms after it.
        target = task.run_at + datetime.timedelta(milliseconds=rng.uniform(-5, 15))
        pause = (target - timezone.now()).total_seconds()
        if pause > 0:
            time.sleep(pause)
        key = task.args[0]
        try:
            cancelled = cancel(task)
        except DatabaseError as exc:  # the cancel did not commit
            errors.append(f"{key}: {type(exc).__name__}: {exc}")
            continue
        (won if cancelled else lost)[key] = timezone.now()

    expect = Expect(committed={t.args[0] for t in tasks}, cancelled=set(won))
    ran = {entry.key: entry.at for entry in Ledger.objects.filter(key__in=lost)}

    def ms(delta: datetime.timedelta) -> float:
        return delta.total_seconds() * 1000

    by_key = {t.args[0]: t for t in tasks}
    won_after_due = [ms(at - by_key[k].run_at) for k, at in won.items()]
    # A lost race: a worker claimed the task before the cancel committed;
    # the ledger time is taken just after the claim, so it may come a little
    # after cancel() returned.
    cancel_minus_start = [ms(at - ran[k]) for k, at in lost.items() if k in ran]
    notes = (
        f"{len(won)} cancels won (commit up to {max(won_after_due, default=0):.1f}"
        f" ms after due), {len(lost)} lost (cancel commit minus ledger time "
        f"{min(cancel_minus_start, default=0):.1f} to "
        f"{max(cancel_minus_start, default=0):.1f} ms), "
        f"{len(errors)} cancel() errors"
    )
    check(rig, f"cancel racing dispatch ({TRIALS} trials)", expect, notes=notes)
    assert won, "no cancel won the race"
    # cancel() is for request code: a worker committing at the same moment
    # must not make it raise.
    assert not errors, (
        f"{len(errors)} of {TRIALS} cancel() calls raised while workers ran: "
        f"{errors[:3]}"
    )
