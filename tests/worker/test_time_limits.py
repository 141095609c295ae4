"""A task past its time limit fails its attempt and takes nothing with it."""

from __future__ import annotations

import pytest
from django.core import checks
from django.test import override_settings

from django_delayq import schedule, task
from django_delayq.exceptions import InvalidTaskDefinition
from django_delayq.models import Status
from tests.conftest import delayq_settings
from tests.support.helpers import drain, refresh
from tests.testapp.models import Order
from tests.testapp.tasks import create_order, spins

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_task_past_its_time_limit_fails_its_attempt_and_is_retried(
    redis_client,
):
    task_row = schedule(spins, args=["spun"])
    drain(rounds=1)
    row = refresh(task_row)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert row.last_error == (
        "TimeLimitExceeded: the task ran longer than its time limit of 0.3 s"
    )
    assert "TimeLimitExceeded" in row.last_traceback
    assert not Order.objects.filter(status="spun").exists()  # rolled back


def test_an_interrupted_task_takes_none_of_its_neighbours_effects(redis_client):
    neighbours = [schedule(create_order, args=[f"n{i}"]) for i in range(3)]
    spinning = schedule(spins, args=["spun"])
    drain(rounds=1)
    assert {refresh(t).status for t in neighbours} == {Status.SUCCEEDED}
    assert refresh(spinning).status == Status.SCHEDULED
    assert sorted(Order.objects.values_list("status", flat=True)) == ["n0", "n1", "n2"]


def test_the_setting_limits_tasks_without_a_limit_of_their_own(redis_client):
    with override_settings(DELAYQ=delayq_settings(_url(redis_client), TIME_LIMIT=0.2)):
        from tests.testapp.tasks import record

        row = schedule(record, args=["slow", 2.0], queue="default")
        drain(rounds=1)
        row = refresh(row)
    assert row.status == Status.SCHEDULED
    assert "time limit of 0.2 s" in row.last_error


def _url(client) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "10", True])
def test_a_bad_time_limit_is_refused_at_definition(value):
    with pytest.raises(InvalidTaskDefinition, match=r"@task\(time_limit=\.\.\.\)"):

        @task(time_limit=value, name=f"bad.limit.{value!r}")
        def limited() -> None:
            pass


def test_a_bad_time_limit_setting_is_a_system_check_error(redis_client):
    with override_settings(DELAYQ=delayq_settings(_url(redis_client), TIME_LIMIT=-5)):
        errors = [e for e in checks.run_checks() if e.id == "delayq.E006"]
    assert errors
    assert 'DELAYQ["TIME_LIMIT"]' in errors[0].msg
