"""DELAYQ["MIDDLEWARE"] in a real worker process, whose threads run tasks in
groups: each run goes through the chain, and a middleware that raises fails
that run only (its neighbours in the group commit, the worker goes on)."""

from __future__ import annotations

import json

import pytest

from django_delayq import schedule_many
from django_delayq.api import Call
from django_delayq.models import DelayedTask, Status
from tests.acceptance.processes import Processes
from tests.testapp.models import Ledger
from tests.testapp.tasks import record
from tools.procs import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def test_middleware_wraps_every_run_of_a_worker(processes: Processes) -> None:
    processes.env["DELAYQ_TEST_MIDDLEWARE"] = json.dumps(
        ["tests.testapp.middleware.Outer", "tests.testapp.middleware.Refuses"]
    )
    keys = [f"k{i}" for i in range(20)]
    tasks = schedule_many(
        [Call(record, args=[key]) for key in keys]
        + [Call(record, args=["refused"], max_attempts=2)]
    )
    worker = processes.start("delayq_run", "--concurrency", "2")

    def settled() -> bool:
        return not DelayedTask.objects.filter(
            pk__in=[t.pk for t in tasks],
            status__in=[Status.SCHEDULED, Status.RUNNING],
        ).exists()

    wait_for(settled, 120, "every task succeeded or failed")
    assert worker.poll() is None  # the worker goes on
    done = DelayedTask.objects.filter(pk__in=[t.pk for t in tasks[:-1]])
    assert {row.status for row in done} == {Status.SUCCEEDED}
    assert {row.result["wrapped"] for row in done} == set(keys)
    refused = DelayedTask.objects.get(pk=tasks[-1].pk)
    assert (refused.status, refused.attempts) == (Status.FAILED, 2)
    assert "PermissionError: the tenant is suspended" in refused.last_error
    # Every successful run went through the outer middleware once, in its
    # transaction; the refused runs' writes rolled back with them.
    outer = Ledger.objects.filter(key__startswith="outer:").count()
    assert outer == len(keys)
    assert set(
        Ledger.objects.exclude(key__startswith="outer:").values_list("key", flat=True)
    ) == set(keys)
