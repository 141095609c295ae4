"""A periodic schedule kept by two dispatchers and two sweepers through a
SIGKILL of one of each and a Redis restarted empty: every tick runs exactly
once, none early."""

from __future__ import annotations

import datetime
import statistics
import time
from collections import Counter

import pytest
from django.conf import settings
from django.utils import timezone

from django_delayq.models import DelayedTask, PeriodicSchedule
from django_delayq.recurring.ticks import parse_tick
from tests.faults.harness import SUMMARY, Rig, sweep_totals
from tests.testapp.models import Ledger
from tools.procs import wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
]

#: How long the schedule runs, and when the faults hit.
RUN = 30.0
KILL_AT = RUN / 2
REDIS_RESTART_AT = RUN * 0.7
SECOND = datetime.timedelta(seconds=1)


def test_an_every_second_schedule_through_kills_and_a_redis_restart(make_rig) -> None:
    rig: Rig = make_rig(
        PERIODIC={
            "heartbeat": {
                "task": "tests.testapp.tasks.record_tick",
                "every": 1,
                # A tick delayed past the next by the faults still runs.
                "catch_up": "all",
            }
        }
    )
    dispatchers = [rig.dispatcher(label=f"dispatch-{n}") for n in "ab"]
    sweepers = [rig.sweeper(label=f"sweep-{n}") for n in "ab"]
    workers = [rig.worker(), rig.worker()]
    rig.wait_ready(*dispatchers, *sweepers, *workers)
    wait_for(
        lambda: PeriodicSchedule.objects.filter(name="heartbeat").exists(),
        30,
        "the schedule planned",
    )
    started = timezone.now()
    begun = time.monotonic()

    def at(moment: float) -> None:
        wait_for(lambda: time.monotonic() - begun >= moment, RUN + 5, f"{moment} s")

    at(KILL_AT)
    rig.kill(dispatchers[0])
    rig.kill(sweepers[0])
    at(REDIS_RESTART_AT)
    rig.redis.kill()
    rig.redis.start()  # empty: every due-set and stream is gone
    at(RUN)
    ended = timezone.now()
    # Every tick from the first after the start to the end of the run.
    expected = []
    tick = started.replace(microsecond=0) + SECOND
    while tick <= ended:
        expected.append(tick)
        tick += SECOND

    def runs() -> Counter[datetime.datetime]:
        return Counter(
            parse_tick(key) for key in Ledger.objects.values_list("key", flat=True)
        )

    wait_for(
        lambda: all(runs()[t] for t in expected),
        60,
        "every tick of the run has run",
    )
    ran = runs()
    lateness = sorted(
        (entry.at - parse_tick(entry.key)).total_seconds()
        for entry in Ledger.objects.all()
        if parse_tick(entry.key) in expected
    )
    twice = {t: n for t, n in ran.items() if n > 1}
    early = [
        entry.key for entry in Ledger.objects.all() if entry.at < parse_tick(entry.key)
    ]
    missing = [t for t in expected if not ran[t]]
    # Nothing else ran but the schedule's own ticks.
    strays = [t for t in ran if (t - started.replace(microsecond=0)) % SECOND]
    p99 = lateness[int(0.99 * (len(lateness) - 1))]
    SUMMARY.append(
        f"[{settings.TEST_DB}] an every=1 s schedule, 2 dispatchers and 2 sweepers, "
        f"one of each SIGKILLed at {KILL_AT:g} s, Redis restarted empty at "
        f"{REDIS_RESTART_AT:g} s of {RUN:g} s: {len(expected)} ticks, "
        f"{len(expected) - len(missing)} ran, {len(twice)} twice, {len(early)} "
        f"early; start lateness median {statistics.median(lateness) * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms, worst {lateness[-1] * 1000:.0f} ms; "
        f"{sweep_totals(sweepers[1])}"
    )
    assert missing == []
    assert twice == {}
    assert early == []
    assert strays == []
    assert rig.dead_unexpectedly() == []
    # Each tick is one row, keyed by its time; none is left failed.
    assert not DelayedTask.objects.filter(status="failed").exists()
