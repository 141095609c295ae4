"""Arguments are bound to the task function's signature: a call that does
not fit is refused when it is made, and a stored call that no longer fits
fails at once instead of being retried."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_delayq import Call, schedule, schedule_many
from django_delayq.exceptions import InvalidSchedule
from django_delayq.models import DelayedTask, OutboxEntry, Status
from tests.support.helpers import drain, due_members, refresh
from tests.testapp.models import Order
from tests.testapp.tasks import (
    add,
    create_order_non_atomic,
    measures,
    order_cancel,
    send_reminder,
)

pytestmark = pytest.mark.django_db(transaction=True)

#: (task, args, kwargs, what the error says after the task's name)
MISFITS = [
    (
        order_cancel,
        [1, 2],
        {},
        "order_cancel() takes 1 positional argument but 2 were given; "
        "it is order_cancel(order_id)",
    ),
    (
        send_reminder,
        [7],
        {"txt": "hi"},
        "send_reminder() got an unexpected keyword argument 'txt'; "
        "it is send_reminder(user_id, *, text='')",
    ),
    (add, [1], {}, "add() missing a required argument: 'b'; it is add(a, b)"),
    (add, [1], {"a": 2, "b": 3}, "add() got multiple values for argument 'a'"),
]


def assert_nothing_written(redis_client, kept=()):
    assert list(DelayedTask.objects.values_list("pk", flat=True)) == list(kept)
    assert not OutboxEntry.objects.exists()
    assert list(due_members(redis_client)) == list(kept)


@pytest.mark.parametrize(("fn", "args", "kwargs", "problem"), MISFITS)
def test_schedule_refuses_arguments_that_do_not_fit_and_writes_nothing(
    redis_client, fn, args, kwargs, problem
):
    with transaction.atomic():
        with pytest.raises(TypeError) as caught:
            schedule(fn, args=args, kwargs=kwargs, delay=60)
        # The caller's transaction is usable: nothing was sent to the database.
        kept = schedule(add, args=[1, 2])
    assert str(caught.value).startswith(
        f"{fn.name}: refused at schedule time, nothing was written: {problem}"
    )
    assert_nothing_written(redis_client, kept=[kept.pk])


@pytest.mark.parametrize(("fn", "args", "kwargs", "problem"), MISFITS)
def test_task_schedule_refuses_arguments_that_do_not_fit(
    redis_client, fn, args, kwargs, problem
):
    with pytest.raises(TypeError, match=f"^{fn.name}: refused at schedule time"):
        fn.schedule(args=args, kwargs=kwargs)
    assert_nothing_written(redis_client)


def test_schedule_by_name_refuses_arguments_that_do_not_fit(redis_client):
    with pytest.raises(TypeError, match=r"^reminders\.send: refused .* 'txt'"):
        schedule("reminders.send", args=[7], kwargs={"txt": "hi"})
    assert_nothing_written(redis_client)


def test_schedule_many_names_the_call_that_does_not_fit_and_writes_nothing(
    redis_client,
):
    calls = [
        Call(add, args=[1, 2]),
        Call(order_cancel, args=[1]),
        Call(order_cancel, args=[1], kwargs={"reason": "paid"}),
    ]
    with pytest.raises(TypeError) as caught:
        schedule_many(calls)
    assert str(caught.value) == (
        "schedule_many() item 2: tests.testapp.tasks.order_cancel: refused at "
        "schedule time, nothing was written: order_cancel() got an unexpected "
        "keyword argument 'reason'; it is order_cancel(order_id). Pass args= "
        "and kwargs= that fit it."
    )
    assert_nothing_written(redis_client)


def test_each_shape_of_call_is_judged_on_its_own_in_a_long_batch(redis_client):
    """A task's calls are bound once per shape (how many positional
    arguments, which keywords): one that fits does not let a later call of
    another shape through, nor does a refused one refuse a fitting call."""
    fits = [Call(add, args=[i, i]) for i in range(50)]
    schedule_many(fits)
    with pytest.raises(
        TypeError, match=r"item 50: .*add\(\) missing a required argument: 'b'"
    ):
        schedule_many([*fits, Call(add, args=[1])])
    with pytest.raises(TypeError, match=r"item 1: .*unexpected keyword argument 'c'"):
        schedule_many([Call(add, args=[1, 2]), Call(add, args=[1, 2], kwargs={"c": 3})])
    with pytest.raises(TypeError):
        schedule(add, args=[1])
    assert len(schedule_many([Call(add, args=[1], kwargs={"b": 2}), *fits])) == 51
    assert DelayedTask.objects.count() == 101


def test_calls_with_the_same_delay_share_a_run_at_and_bad_delays_are_refused(
    redis_client,
):
    tasks = schedule_many(
        [Call(add, args=[i, i], delay=60) for i in range(3)]
        + [Call(add, args=[9, 9], delay=60.0), Call(add, args=[8, 8], delay=61)]
    )
    assert len({task.run_at for task in tasks[:4]}) == 1
    assert (tasks[4].run_at - tasks[0].run_at).total_seconds() == 1
    for bad in (True, -1, float("nan")):
        with pytest.raises(InvalidSchedule, match="delay="):
            schedule_many(
                [Call(add, args=[1, 1], delay=60), Call(add, args=[1, 1], delay=bad)]
            )
    assert DelayedTask.objects.count() == 5


def test_arguments_that_fit_are_scheduled_as_before(redis_client):
    rows = [
        schedule(send_reminder, args=[7]),
        schedule(send_reminder, kwargs={"user_id": 7, "text": "hi"}),
        *schedule_many([Call(add, args=[1], kwargs={"b": 2})]),
    ]
    assert set(due_members(redis_client)) == {row.pk for row in rows}


def stored_with(row: DelayedTask, args: list[object]) -> DelayedTask:
    """The row with ``args`` written by hand, as a row scheduled before its
    function's signature changed would hold them."""
    DelayedTask.objects.filter(pk=row.pk).update(args=args)
    return row


@pytest.mark.parametrize("fn", [add, create_order_non_atomic])
def test_stored_arguments_that_no_longer_fit_fail_the_task_without_retrying(
    redis_client, fn
):
    """Alone, atomic or not (groups: below)."""
    row = stored_with(schedule(fn, args=[1, 2] if fn is add else ["x"]), [1, 2, 3])
    drain()
    row = refresh(row)
    assert (row.status, row.attempts, row.max_attempts) == (Status.FAILED, 1, 3)
    function = fn.func.__name__
    assert row.last_error.startswith(
        f"TypeError: {fn.name}: not called, its stored arguments do not fit it: "
        f"{function}() takes "
    )
    assert row.last_traceback.startswith("TypeError: ")
    assert not Order.objects.exists()  # the function never ran
    assert due_members(redis_client) == {}


def test_in_a_group_only_the_task_whose_arguments_no_longer_fit_fails(redis_client):
    """Tasks due together run as a group: the neighbour is not charged."""
    good = schedule(add, args=[1, 2])
    bad = stored_with(schedule(add, args=[3, 4]), [3])
    drain()
    good, bad = refresh(good), refresh(bad)
    assert (good.status, good.result) == (Status.SUCCEEDED, 3)
    assert (bad.status, bad.attempts) == (Status.FAILED, 1)
    assert bad.last_error.endswith(
        "add() missing a required argument: 'b'; it is add(a, b). Schedule it "
        "again with arguments that fit."
    )


def test_a_type_error_inside_the_function_is_retried(redis_client):
    row = schedule(measures, args=[5])
    drain()
    row = refresh(row)
    # Retried later, as any failure of the function: not failed at once.
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert row.last_error == "TypeError: object of type 'int' has no len()"
    assert "return len(value)" in row.last_traceback
    assert list(due_members(redis_client)) == [row.pk]
