"""The loops refuse to start under ``DELAYQ["TEST_MODE"]``: a test settings
module deployed would otherwise run tasks late, or in the web process."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_delayq import schedule
from django_delayq.models import DelayedTask, Status
from django_delayq.testing import test_mode
from tests.support.helpers import due_members
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["manual", "immediate"])
@pytest.mark.parametrize(
    "command",
    [
        ["delayq_dispatch", "--once"],
        ["delayq_worker", "--once"],
        ["delayq_sweep", "--once"],
        ["delayq_run"],  # no --once: refused before it starts anything
    ],
)
def test_a_loop_refuses_to_start_in_a_test_mode(redis_client, command, mode):
    with test_mode(mode), pytest.raises(CommandError) as refused:
        call_command(*command)
    assert str(refused.value) == (
        f'{command[0]} does not run with DELAYQ["TEST_MODE"] = {mode!r}: a test '
        f"mode is for tests, which run what is due with "
        f"django_delayq.testing.run_due(). Remove TEST_MODE from the settings "
        f"this process uses (check --deploy reports it as delayq.E017)."
    )


def test_a_manual_mode_task_is_not_run_nor_indexed_by_a_sweeper(redis_client):
    with test_mode("manual"):
        task = schedule(add, args=[1, 2])
        with pytest.raises(CommandError):
            call_command("delayq_sweep", "--once")
    assert due_members(redis_client) == {}
    assert DelayedTask.objects.get(pk=task.pk).status == Status.SCHEDULED
