"""What waits for a limit is shown apart from lateness: in delayq_status,
the metrics and the signal task_throttled."""

from __future__ import annotations

import contextlib
import datetime
import io
import json

import pytest
from django.core.management import call_command
from django.utils import timezone
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from django_delayq import schedule, signals
from django_delayq.dispatcher import Dispatcher
from django_delayq.metrics.collector import BacklogCollector
from django_delayq.models import DelayedTask
from tests.support.metrics_scrape import parse, value
from tests.testapp.limited import two_at_once

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "tests.testapp.limited.two_at_once"


def status_json() -> dict:
    out = io.StringIO()
    with contextlib.suppress(SystemExit):  # its exit status: not healthy
        call_command("delayq_status", "--json", stdout=out)
    return json.loads(out.getvalue())


@pytest.fixture
def five_due_two_admitted(limited_queue):
    """Five tasks due an hour ago on a limit of 2; a dispatcher pass with no
    worker: two admitted, three waiting."""
    throttled: list = []

    def on_throttled(sender, queue, task_ids, **kwargs):
        throttled.extend(task_ids)

    signals.task_throttled.connect(on_throttled)
    past = timezone.now() - datetime.timedelta(hours=1)
    tasks = [schedule(two_at_once, args=[f"k{i}"], eta=past) for i in range(5)]
    try:
        Dispatcher(["limited"]).run(once=True)
    finally:
        signals.task_throttled.disconnect(on_throttled)
    return tasks, throttled


def test_the_signal_names_the_tasks_that_wait(five_due_two_admitted):
    tasks, throttled = five_due_two_admitted
    assert len(throttled) == 3
    assert set(throttled) <= {t.pk for t in tasks}


def test_status_counts_them_apart_from_the_late(five_due_two_admitted):
    report = status_json()
    assert report["overdue"] == 0
    assert report["waiting_for_limits"] == 5  # none started: no worker
    [state] = [s for s in report["limits"] if s["limit"] == NAME]
    assert state["queue"] == "limited"
    assert state["rule"] == "2 at once"
    assert (state["running"], state["waiting"], state["throttled"]) == (2, 3, 3)
    assert state["admitted"] == 2
    assert state["waited_seconds"] >= 3600 * 2
    assert not any("overdue" in problem for problem in report["problems"])
    assert "limited:limits" in {s["shard"] for s in report["shards"]}


def test_the_text_report_has_a_line_per_limit(five_due_two_admitted):
    out = io.StringIO()
    with contextlib.suppress(SystemExit):
        call_command("delayq_status", stdout=out)
    text = out.getvalue()
    assert "Waiting for limits: 5 task(s) due, not late" in text
    [line] = [line for line in text.splitlines() if NAME in line]
    assert line.split()[:6] == ["limited", NAME, "2", "at", "once", "2"]


def test_the_metrics_show_each_limit(five_due_two_admitted):
    registry = CollectorRegistry()
    registry.register(BacklogCollector())
    samples = parse(generate_latest(registry).decode())
    labels = {"queue": "limited", "limit": NAME}
    assert value(samples, "delayq_limit_running", **labels) == 2
    assert value(samples, "delayq_limit_waiting", **labels) == 3
    assert value(samples, "delayq_limit_concurrency", **labels) == 2
    assert value(samples, "delayq_limit_throttled_total", **labels) == 3
    assert value(samples, "delayq_limit_admitted_total", **labels) == 2
    assert value(samples, "delayq_overdue_backlog", queue="limited") == 0
    assert DelayedTask.objects.waiting_for_limits(by=timezone.now()).count() == 5


def test_the_admin_dashboard_shows_each_limit_and_the_tasks_waiting(
    five_due_two_admitted, admin_client
):
    from django.urls import reverse

    from tests.admin.test_dashboard import DASHBOARD, section

    response = admin_client.get(reverse(DASHBOARD))
    assert response.status_code == 200
    limits = section(response, "delayq-limits")
    assert "Queue Limit Allows Running Waiting Keys waiting Throttled Waited" in limits
    assert f"limited {NAME} 2 at once 2 3 0 3" in limits
    assert "5 tasks due wait for their limits: not counted as overdue." in limits
    # Not listed as overdue.
    assert 'id="delayq-overdue-tasks"' not in response.content.decode()
