"""Periodic schedules across restarts of real processes: ticks missed while
everything was stopped, by each ``catch_up`` policy; then a deploy that
changes one schedule and removes the others."""

from __future__ import annotations

import datetime
import itertools
import json
import re
from collections.abc import Iterable

import pytest
from django.utils import timezone

from django_delayq.models import DelayedTask, Status
from django_delayq.recurring.planner import LOOKAHEAD
from django_delayq.recurring.ticks import parse_tick
from tests.acceptance.processes import Processes
from tests.testapp.models import Ledger
from tools.procs import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

SECOND = datetime.timedelta(seconds=1)
POLICIES = ("none", "latest", "all")
#: How long everything stays stopped: fifteen ticks of every=1 s, of which
#: those more than MISSED_AFTER (5 s) before the restart count as missed.
DOWN = datetime.timedelta(seconds=15.5)


def entry(policy: str, every: int = 1) -> dict[str, object]:
    return {
        "task": "tests.testapp.tasks.record_tick",
        "every": every,
        "catch_up": policy,
        "kwargs": {"label": f"{policy}:"},
    }


def ran(policy: str) -> list[datetime.datetime]:
    """The ticks of ``policy``'s schedule that ran, in order."""
    prefix = f"{policy}:"
    keys = Ledger.objects.filter(key__startswith=prefix).values_list("key", flat=True)
    return sorted(parse_tick(key.removeprefix(prefix)) for key in keys)


def gaps(ticks: Iterable[datetime.datetime], period: datetime.timedelta) -> list[int]:
    """How many ticks are missing between each two that ran."""
    ticks = list(ticks)
    return [round((b - a) / period) - 1 for a, b in itertools.pairwise(ticks)]


def start(processes: Processes, periodic: dict[str, object]) -> list[object]:
    processes.env["DELAYQ_TEST_PERIODIC"] = json.dumps(periodic)
    return [processes.start("delayq_dispatch"), processes.start("delayq_worker")]


def test_catch_up_after_a_stop_then_a_deploy_that_changes_and_removes(
    processes: Processes,
) -> None:
    dispatcher, _ = start(processes, {p: entry(p) for p in POLICIES})
    wait_for(lambda: all(len(ran(p)) >= 2 for p in POLICIES), 60, "two ticks of each")
    processes.stop_all()
    stopped = timezone.now()
    before = {p: ran(p) for p in POLICIES}
    # Everything is down for fifteen ticks.
    wait_for(lambda: timezone.now() >= stopped + DOWN, 30, "the downtime")
    # The dispatcher first: a worker started before it would run the ticks
    # a stopping worker left in its stream before the catch-up cancels
    # them (docs/guide/periodic.md says so).
    processes.env["DELAYQ_TEST_PERIODIC"] = json.dumps({p: entry(p) for p in POLICIES})
    dispatcher = processes.start("delayq_dispatch")
    wait_for(
        lambda: all(
            f"periodic schedule {p}: " in processes.log(dispatcher) for p in POLICIES
        ),
        60,
        "the catch-up of each schedule",
    )
    restarted = timezone.now()
    processes.start("delayq_worker")
    wait_for(
        lambda: all(len([t for t in ran(p) if t > restarted]) >= 2 for p in POLICIES),
        60,
        "the schedules running again",
    )
    log = processes.log(dispatcher)
    for policy in POLICIES:
        ticks = ran(policy)
        assert len(ticks) == len(set(ticks)), f"{policy}: a tick ran twice"
        assert ticks[: len(before[policy])] == before[policy]
        missed = re.search(
            rf"periodic schedule {policy}: (\d+) tick\(s\) missed .* catch_up='"
            rf"{policy}' runs (\d+) of them",
            log,
        )
        assert missed, f"{policy}: no catch-up line in\n{log}"
        count, runs = int(missed[1]), int(missed[2])
        assert count >= 8
        # The ticks missed are those after the last that ran before the
        # stop, up to the catch-up; then the ticks run on time again.
        holes = [g for g in gaps(ticks, SECOND) if g]
        if policy == "all":
            assert runs == count
            assert holes == []  # every tick ran
        elif policy == "latest":
            assert runs == 1
            assert holes == [count - 1]  # all but the latest missed one
        else:
            assert runs == 0
            assert holes == [count]  # none of them

    # A deploy: "all" now every 2 s, "none" and "latest" removed.
    processes.stop_all()
    deployed = timezone.now()
    dispatcher, _ = start(processes, {"all": entry("all", every=2)})
    # Ticks the old definition planned (up to its lookahead past the stop)
    # and that fell due before the new one was planned still run: they were
    # due before the deploy. After that, only the new definition's.
    settled = deployed + LOOKAHEAD
    wait_for(
        lambda: len([t for t in ran("all") if t > settled]) >= 2,
        60,
        "the changed schedule running",
    )
    log = processes.log(dispatcher)
    assert "periodic schedule all is now every 2 s (was every 1 s)" in log
    for removed in ("none", "latest"):
        assert f"periodic schedule {removed} is no longer declared" in log
        assert not DelayedTask.objects.filter(
            key__startswith=f"periodic:{removed}@",
            status=Status.SCHEDULED,
            run_at__gt=settled,
        ).exists()
    ticks = ran("all")
    assert len(ticks) == len(set(ticks))
    # Nothing due before the deploy was lost: every second up to it ran...
    old = [t for t in ticks if t <= deployed]
    assert gaps(old, SECOND) == [0] * (len(old) - 1)
    # ...and after it, only the new definition's ticks.
    new = [t for t in ticks if t > settled]
    assert all(t.second % 2 == 0 for t in new)
