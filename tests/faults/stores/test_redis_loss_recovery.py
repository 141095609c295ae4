"""I1 after Redis loses data, with the default sweep interval: the tasks due
soon after the loss start within about 2 s, because the dispatcher notices
the loss on its next move and rebuilds the index at once, not at the
sweeper's next pass 30 s later. A far-future backlog costs the rebuild
nothing and none of it runs."""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Callable

import pytest
from django.utils import timezone

from django_delayq.models import DelayedTask
from tests.faults.harness import Proc, Rig, schedule_bulk
from tests.faults.invariants import Expect, check
from tests.testapp.models import Ledger
from tools.procs import wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]

#: Far-future tasks: in the database, indexed in Redis, never due here.
BACKLOG = 20_000
#: Tasks due over the window around the loss.
SOON = 500
#: The loss comes this long after the first soon task is due...
LOSS_AFTER = 3.0
#: ...and the soon tasks are due over this long.
WINDOW = 15.0
#: The sweeper's default --interval: it does not pass again in the window.
SWEEP_INTERVAL = 30.0


def _flushall(rig: Rig) -> None:
    rig.client.flushall()


def _restart_empty(rig: Rig) -> None:
    rig.redis.kill()
    rig.redis.start()


def start_defaults(rig: Rig) -> list[Proc]:
    """A sweeper, a dispatcher and two workers with the default intervals
    (sweep every 30 s, leases of 30 s)."""
    procs = [
        rig.sweeper(interval=SWEEP_INTERVAL),
        rig.start("delayq_dispatch"),
        rig.worker(),
        rig.worker(),
    ]
    rig.wait_ready(*procs)
    return procs


@pytest.mark.parametrize(
    ("fault", "inject"),
    [("FLUSHALL", _flushall), ("redis killed, restarted empty", _restart_empty)],
)
def test_tasks_due_after_a_redis_loss_start_within_two_seconds(
    rig: Rig, fault: str, inject: Callable[[Rig], None]
) -> None:
    sweeper = start_defaults(rig)[0]
    batch = schedule_bulk("backlog", BACKLOG, delay=lambda i: 86_400 + i)
    backlog = set(batch.committed)
    first = 2.0  # seconds from now: scheduling the soon ones takes a moment
    batch += schedule_bulk(
        "soon", SOON, delay=lambda i: first + i * WINDOW / SOON, chunk=100
    )
    started = time.monotonic()
    wait_for(
        lambda: Ledger.objects.filter(key__startswith="soon-").exists(),
        20,
        "the first soon task ran",
    )
    time.sleep(max(0.0, first + LOSS_AFTER - (time.monotonic() - started)))
    passes = sweeper.log().count("sweep:")
    lost_at = timezone.now()
    inject(rig)
    back_at = timezone.now()  # Redis answers again

    report = check(
        rig,
        f"{fault} with a backlog of {BACKLOG} (default sweep interval)",
        Expect(
            committed=batch.keys,
            rolled_back=batch.rolled_back,
            # Tasks in the workers' hands (2 workers x 2 threads) when
            # their stream entries went may run again.
            max_extra=4,
        ),
        notes=lambda: lateness_note(back_at),
    )
    ran = set(Ledger.objects.values_list("key", flat=True))
    assert not ran & backlog, "far-future tasks ran"
    late = lateness_after(back_at)
    assert len(late) > SOON // 2, "the loss came after most soon tasks had run"
    p99 = statistics.quantiles(late, n=100)[98]
    seen = (
        f"{fault}: tasks due after the loss (at {lost_at:%H:%M:%S.%f}) started "
        f"p99 {p99:.2f} s, max {max(late):.2f} s late; {report.tasks_run} ran"
    )
    assert p99 <= 2.0, seen
    assert max(late) <= 3.0, seen
    assert sweeper.log().count("sweep:") == passes, (
        "the sweeper passed during the window: it, not the dispatcher, may "
        "have repaired the index"
    )


def lateness_after(moment: datetime.datetime) -> list[float]:
    """How late each soon task due after ``moment`` started, in seconds."""
    rows = Ledger.objects.filter(key__startswith="soon-").values_list("key", "at")
    started = dict(rows)
    due = {
        str(task.args[0]): task.run_at
        for task in DelayedTask.objects.filter(run_at__gt=moment).only("args", "run_at")
        if str(task.args[0]).startswith("soon-")
    }
    return [(started[key] - at).total_seconds() for key, at in due.items()]


def lateness_note(moment: datetime.datetime) -> str:
    late = sorted(lateness_after(moment))
    if len(late) < 2:
        return "no task due after the loss"
    p50, p99 = statistics.median(late), statistics.quantiles(late, n=100)[98]
    return (
        f"{len(late)} due after the loss started p50 {p50:.2f} s, "
        f"p99 {p99:.2f} s, max {late[-1]:.2f} s late"
    )
