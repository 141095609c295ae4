"""Sentry in a real worker process, initialised in its settings without the
integration passed (the defaults apply once Sentry is initialised): a task
that fails for good is reported once, with its tags, though the worker's
``task failed`` line also goes through Sentry's logging integration."""

from __future__ import annotations

from pathlib import Path

import pytest

from django_delayq import schedule
from django_delayq.models import DelayedTask, Status
from tests.acceptance.processes import Processes
from tests.support.sentry import read_items
from tests.testapp.tasks import always_fails, record
from tools.procs import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def test_a_worker_reports_a_failed_task_once(
    processes: Processes, tmp_path: Path
) -> None:
    sent = tmp_path / "sentry.jsonl"
    processes.env["DELAYQ_TEST_SENTRY"] = str(sent)
    failing = schedule(always_fails, args=["card declined"], max_attempts=1)
    fine = schedule(record, args=["fine"])
    processes.start("delayq_dispatch")
    processes.start("delayq_worker", "--concurrency", "2")

    def settled() -> bool:
        rows = DelayedTask.objects.filter(pk__in=[failing.pk, fine.pk])
        return {row.status for row in rows} == {Status.FAILED, Status.SUCCEEDED}

    wait_for(settled, 120, "one task failed, the other succeeded")
    # The worker logs the failure, then reports it: once the report is in
    # the file, a copy made of the logged line would be there already.
    wait_for(lambda: read_items(sent, "event"), 60, "the failure is reported")
    [event] = read_items(sent, "event")
    [exception] = event["exception"]["values"]
    assert (exception["type"], exception["value"]) == ("RuntimeError", "card declined")
    assert exception["stacktrace"]["frames"][-1]["function"] == "always_fails"
    assert event["tags"]["delayq.task_name"] == always_fails.name
    assert event["tags"]["delayq.task_id"] == str(failing.pk)
    assert event["tags"]["delayq.attempt"] == "1/1"
    assert event["tags"]["delayq.final"] == "yes"
    assert event["contexts"]["delayq"]["queue"] == "default"
