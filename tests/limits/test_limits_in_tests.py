"""The testing toolkit with tasks under limits: run_due() runs them one
after another, through the real path, and a test can assert a task's limits."""

from __future__ import annotations

import pytest

from django_delayq import schedule
from django_delayq.models import DelayedTask, Status
from django_delayq.testing import assert_scheduled, run_due, test_mode
from tests.testapp.limited import five_a_second, one_per_order, two_at_once
from tests.testapp.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


def test_run_due_runs_tasks_under_limits_without_redis(limited_queue):
    with test_mode("manual"):
        for i in range(3):
            schedule(two_at_once, args=[f"t{i}"])
        schedule(one_per_order, args=[7, "o"])
        assert_scheduled(two_at_once, args=["t0"])
        assert len(run_due()) == 4
    assert sorted(Run.objects.values_list("key", flat=True)) == ["o", "t0", "t1", "t2"]
    assert set(DelayedTask.objects.values_list("status", flat=True)) == {
        Status.SUCCEEDED
    }


def test_a_task_s_limits_can_be_asserted():
    assert two_at_once.concurrency_limit == 2
    assert five_a_second.rate_limit == "5/s"
    assert one_per_order.limit_by == "order_id"
    assert one_per_order.concurrency_limit == 1
