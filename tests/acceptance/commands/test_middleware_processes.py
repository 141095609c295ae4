"""DELAYQ["MIDDLEWARE"] in a real worker process, whose threads run tasks in
groups: each run goes through the chain, and a middleware that raises fails
that run only (its neighbours in the group commit, the worker goes on); the
metadata a task was scheduled with reaches its runs there."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from django_delayq import schedule_many
from django_delayq.api import Call
from django_delayq.models import DelayedTask, Status
from tests.acceptance.processes import Processes
from tests.testapp.middleware import request_id
from tests.testapp.models import Ledger
from tests.testapp.tasks import reads_meta, record
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


def test_the_metadata_reaches_every_run_in_a_worker_process(
    processes: Processes, settings
) -> None:
    """Scheduled here with the request id recipe's middleware, which adds the
    request id; run by a worker whose middleware puts it back, in groups,
    a task failing its first attempt included."""
    recipe = ["tests.testapp.middleware.RequestId"]
    processes.env["DELAYQ_TEST_MIDDLEWARE"] = json.dumps(recipe)
    token = request_id.set("req-42")
    try:
        with override_settings(DELAYQ={**settings.DELAYQ, "MIDDLEWARE": recipe}):
            tasks = schedule_many(
                [
                    Call(reads_meta, args=[f"m{i}"], meta={"tenant": f"t{i}"})
                    for i in range(12)
                ]
                + [Call(reads_meta, args=["again"], kwargs={"fail_first": True})]
            )
    finally:
        request_id.reset(token)
    worker = processes.start("delayq_run", "--concurrency", "2")
    wait_for(
        lambda: (
            DelayedTask.objects.filter(
                pk__in=[t.pk for t in tasks], status=Status.SUCCEEDED
            ).count()
            == len(tasks)
        ),
        120,
        "every task succeeded",
    )
    assert worker.poll() is None
    rows = {
        row.pk: row for row in DelayedTask.objects.filter(pk__in=[t.pk for t in tasks])
    }
    for i, task in enumerate(tasks[:-1]):
        expected = {
            "team": "billing",
            "tenant": f"t{i}",
            "request_id": "req-42",
        }
        assert rows[task.pk].meta == expected
        assert rows[task.pk].result == {"meta": expected, "request_id": "req-42"}
    again = rows[tasks[-1].pk]
    assert again.attempts == 2
    assert again.result["request_id"] == "req-42"
