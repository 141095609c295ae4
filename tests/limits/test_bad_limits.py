"""Bad limits are refused where they are written: at decoration, in the
settings' checks, or at schedule() with nothing written."""

from __future__ import annotations

import re

import pytest
from django.db import transaction

from django_delayq import periodic, schedule, task
from django_delayq.conf import check_ids
from django_delayq.conf.problems import find_problems
from django_delayq.conf.settings import parse
from django_delayq.exceptions import (
    InvalidArgument,
    InvalidConfiguration,
    InvalidTaskDefinition,
)
from django_delayq.models import DelayedTask
from django_delayq.store.keys import LIMITS_SHARD
from tests.testapp.limited import (
    one_per_order,
    one_per_tenant,
    per_sender,
    two_at_once,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "5", 100_001])
def test_a_concurrency_limit_is_a_whole_number_from_1(value):
    with pytest.raises(InvalidTaskDefinition, match=r"@task\(concurrency_limit=...\)"):

        @task(name="tests.refused", concurrency_limit=value)
        def f() -> None: ...


@pytest.mark.parametrize("value", ["abc", "0/s", "5/d", "5", 5, "-1/s", "1.5/s"])
def test_a_rate_limit_is_n_per_second_minute_or_hour(value):
    with pytest.raises(InvalidTaskDefinition, match=r"@task\(rate_limit=...\)"):

        @task(name="tests.refused", rate_limit=value)
        def f() -> None: ...


def test_limit_by_names_a_parameter_the_function_has():
    with pytest.raises(InvalidTaskDefinition, match="has no parameter named 'order'"):

        @task(name="tests.refused", concurrency_limit=1, limit_by="order")
        def f(order_id: int) -> None: ...


def test_a_key_function_takes_the_task_s_arguments():
    with pytest.raises(InvalidTaskDefinition, match="cannot take every call"):

        @task(name="tests.refused", rate_limit="10/s", limit_by=lambda sender: sender)
        def f(sender: str, text: str) -> None: ...


def test_limit_by_needs_a_limit():
    with pytest.raises(InvalidTaskDefinition, match="has no limit"):

        @task(name="tests.refused", limit_by="sender")
        def f(sender: str) -> None: ...


def test_periodic_takes_the_same_limits_and_checks_them():
    with pytest.raises(InvalidTaskDefinition, match="concurrency_limit"):

        @periodic(cron="* * * * *", name="tests.refused", concurrency_limit=0)
        def f() -> None: ...


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency_limit": 0}, r'\["concurrency_limit"\] must be a whole number'),
        ({"rate_limit": "10/d"}, r'\["rate_limit"\] must be a string "N/s"'),
    ],
)
def test_a_queue_limit_is_checked_with_the_settings(options, message):
    raw = {"REDIS_URL": "redis://127.0.0.1:6379/0", "QUEUES": {"payments": options}}
    [problem] = [p for p in find_problems(raw) if p.error]
    assert problem.id == check_ids.QUEUES
    assert re.search(message, problem.msg)
    with pytest.raises(InvalidConfiguration, match="payments"):
        parse(raw)


@pytest.fixture
def rows_unchanged(limited_queue):
    before = DelayedTask.objects.count()
    yield
    assert DelayedTask.objects.count() == before


def test_a_key_function_that_raises_writes_nothing(rows_unchanged):
    with transaction.atomic():
        with pytest.raises(
            InvalidArgument, match=r"limit_by could not find the key.*KeyError"
        ):
            schedule(per_sender, args=[{"text": "hi"}])
        # The caller's transaction is still usable.
        assert DelayedTask.objects.filter(shard=LIMITS_SHARD).count() == 0


def test_a_key_that_is_not_a_string_writes_nothing(rows_unchanged):
    with pytest.raises(InvalidArgument, match="limit_by must give a non-empty str"):
        schedule(one_per_order, args=[None, "k"])
    with pytest.raises(InvalidArgument, match="limit_by must give a non-empty str"):
        schedule(one_per_tenant, args=[3, "k"])  # a function must give a str


def test_a_task_with_limits_runs_on_its_own_queue_only(rows_unchanged):
    with pytest.raises(InvalidArgument, match="counted on its own queue 'limited'"):
        schedule(two_at_once, args=["k"], queue="orders")


def test_an_int_argument_is_a_key(limited_queue):
    row = schedule(one_per_order, args=[42, "k"])
    assert row.shard == LIMITS_SHARD


def test_a_django_task_on_a_queue_with_limits_waits_for_them(limited_queue, settings):
    from tests.testapp.django_tasks import add

    settings.DELAYQ = {
        **settings.DELAYQ,
        "QUEUES": {**settings.DELAYQ["QUEUES"], "reports": {"concurrency_limit": 1}},
    }
    result = add.using(queue_name="reports").enqueue(1, 2)
    assert DelayedTask.objects.get(pk=result.id).shard == LIMITS_SHARD
    result = add.enqueue(1, 2)  # the queue "default" has none
    assert DelayedTask.objects.get(pk=result.id).shard == 0


def test_a_stored_call_whose_key_is_lost_stays_under_its_limits(limited_queue, caplog):
    """A key function that fails when the dispatcher reads the row (changed
    by a deploy) counts the task under one shared key, never without limits."""
    from django_delayq.limits.groups import KEY_SEPARATOR, group_of_row

    row = DelayedTask(
        name=per_sender.name, queue="limited", args=[{"text": "hi"}], kwargs={}
    )
    with caplog.at_level("WARNING", logger="django_delayq"):
        group = group_of_row(row)
    assert group == f"task:{per_sender.name}{KEY_SEPARATOR}#unkeyed"
    assert "counted under the key #unkeyed" in caplog.text
