"""A process killed right after its commit, before its Redis write: the
sweeper repairs Redis from the rows (I1), and a task never runs early (I3)
nor after a committed cancel (I6)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from django_delayq.models import DelayedTask
from tests.faults.harness import (
    ROOT,
    SWEEP_INTERVAL,
    Rig,
    schedule_records,
    sweep_count,
    sweep_totals,
)
from tests.faults.invariants import Expect, check

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]

TASKS = 40


def crash_after_commit(rig: Rig, *args: str) -> list[dict[str, Any]]:
    """Run the helper script (see crash_after_commit.py); one dict per child."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.faults.crash_after_commit", *args],
        env=rig.env,
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    children = [json.loads(line) for line in done.stdout.decode().splitlines()]
    for child in children:
        child["stderr"] = done.stderr.decode()[-3000:]  # for failure messages
    return children


def test_tasks_committed_by_a_process_killed_before_its_redis_write_run(
    rig: Rig,
) -> None:
    procs = [rig.sweeper(), rig.dispatcher(), rig.worker()]
    rig.wait_ready(*procs)

    children = crash_after_commit(rig, "schedule", "crash", str(TASKS), "1500")
    assert len(children) == TASKS
    committed = {c["key"] for c in children if c["committed"]}
    rolled_back = {c["key"] for c in children if not c["committed"]}
    rolled_back |= {c["savepoint"] for c in children if c["savepoint"]}
    # Each committing child died of its own on-commit SIGKILL, which ran
    # before django-delayq's on-commit Redis write; the others rolled back.
    assert {c["ended"] for c in children if c["committed"]} == {"SIGKILL"}, children[0][
        "stderr"
    ]
    assert {c["ended"] for c in children if not c["committed"]} == {"exit 0"}

    expect = Expect(
        committed=committed,
        rolled_back=rolled_back,
        max_lateness=SWEEP_INTERVAL + 4.0,
    )
    report = check(rig, "crash after commit, before the Redis write", expect)

    # Evidence that Redis never heard of them: the sweeper's passes indexed
    # that many again, no more (a task that ran meanwhile is no repair).
    reindexed = sweep_count(procs[0], "reindexed")
    assert reindexed == len(committed), sweep_totals(procs[0])
    assert report.tasks_run == len(committed)


def test_cancel_and_reschedule_committed_by_a_process_killed_before_its_redis_write(
    rig: Rig,
) -> None:
    """Redis keeps the old state: members of cancelled tasks, and old due
    times, earlier and later than the rows'. The row decides."""
    procs = [rig.sweeper(), rig.dispatcher(), rig.worker()]
    rig.wait_ready(*procs)
    # Due late enough that none has run when the helper's children commit.
    to_cancel = schedule_records("cancelled", 10, delay=lambda i: 4.0, rollback_every=0)
    to_later = schedule_records("later", 10, delay=lambda i: 4.0, rollback_every=0)
    to_earlier = schedule_records("earlier", 10, delay=lambda i: 8.0, rollback_every=0)

    ids = [str(t.pk) for t in to_cancel.committed.values()]
    operations = [f"cancel:{task_id}" for task_id in ids]
    operations += [f"reschedule:{t.pk}:6000" for t in to_later.committed.values()]
    operations += [f"reschedule:{t.pk}:200" for t in to_earlier.committed.values()]
    ended = crash_after_commit(rig, "apply", *operations)
    assert {c["ended"] for c in ended} == {"SIGKILL"}, ended[0]["stderr"]
    # The rows moved; Redis still has every old member and score (unless a
    # sweeper pass already repaired some).
    assert all(
        row.status == "cancelled" for row in DelayedTask.objects.filter(pk__in=ids)
    )

    expect = Expect(
        committed=to_cancel.keys | to_later.keys | to_earlier.keys,
        cancelled=to_cancel.keys,
        # The tasks moved earlier are due at once; the sweeper corrects their
        # score within an interval.
        max_lateness=SWEEP_INTERVAL + 4.0,
    )
    check(
        rig,
        "cancel()/reschedule() crash after commit, before the Redis write",
        expect,
        notes=lambda: (
            f"10 cancelled, 10 moved later, 10 moved earlier; {sweep_totals(procs[0])}"
        ),
    )
