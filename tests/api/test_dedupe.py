"""Dedupe keys: at most one scheduled or running task per key."""

from __future__ import annotations

import contextlib

import pytest
from django.db import transaction

from django_delayq import cancel, schedule
from django_delayq.exceptions import DuplicateTask, InvalidArgument
from django_delayq.models import DelayedTask, Status
from tests.support.helpers import due_members, indexed_score
from tests.testapp.models import Order
from tests.testapp.tasks import order_cancel

pytestmark = pytest.mark.django_db(transaction=True)


def test_scheduling_a_held_key_raises_and_keeps_the_holder(redis_client):
    first = schedule(order_cancel, delay=900, args=[1], key="order-cancel:1")
    with pytest.raises(DuplicateTask, match="replace=True") as caught:
        schedule(order_cancel, delay=60, args=[1], key="order-cancel:1")
    assert caught.value.key == "order-cancel:1"
    assert caught.value.existing_id == first.pk
    assert list(DelayedTask.objects.values_list("pk", flat=True)) == [first.pk]
    assert set(due_members(redis_client)) == {first.pk}


def test_the_callers_transaction_survives_a_key_clash(redis_client):
    schedule(order_cancel, delay=900, args=[1], key="k")
    with transaction.atomic():
        with contextlib.suppress(DuplicateTask):
            schedule(order_cancel, delay=60, args=[1], key="k")
        # On PostgreSQL a failed INSERT would abort the transaction without
        # the savepoint; the caller can still write.
        Order.objects.create(status="paid")
    assert Order.objects.filter(status="paid").count() == 1
    assert DelayedTask.objects.count() == 1


def test_replace_cancels_the_holder_and_indexes_the_new_task(redis_client):
    old = schedule(order_cancel, delay=900, args=[1], key="k")
    with transaction.atomic():
        new = schedule(order_cancel, delay=60, args=[2], key="k", replace=True)
    assert DelayedTask.objects.get(pk=old.pk).status == Status.CANCELLED
    assert DelayedTask.objects.get(pk=new.pk).status == Status.SCHEDULED
    assert set(due_members(redis_client)) == {new.pk}


def test_replace_without_a_holder_just_schedules(redis_client):
    task = schedule(order_cancel, delay=60, args=[2], key="fresh", replace=True)
    assert indexed_score(redis_client, task) is not None


def test_rolled_back_replace_keeps_the_old_task(redis_client):
    old = schedule(order_cancel, delay=900, args=[1], key="k")
    with pytest.raises(RuntimeError), transaction.atomic():
        schedule(order_cancel, delay=60, args=[2], key="k", replace=True)
        raise RuntimeError
    assert list(DelayedTask.objects.values_list("pk", "status")) == [
        (old.pk, Status.SCHEDULED)
    ]
    assert set(due_members(redis_client)) == {old.pk}


def test_a_running_holder_cannot_be_replaced(redis_client):
    old = schedule(order_cancel, delay=0, args=[1], key="k")
    DelayedTask.objects.filter(pk=old.pk).update(status=Status.RUNNING)
    with pytest.raises(DuplicateTask, match="already running"):
        schedule(order_cancel, delay=60, args=[2], key="k", replace=True)
    assert DelayedTask.objects.count() == 1


def test_a_key_is_free_again_once_its_task_is_finished_or_cancelled(redis_client):
    first = schedule(order_cancel, delay=900, args=[1], key="k")
    cancel(first)
    second = schedule(order_cancel, delay=900, args=[1], key="k")
    DelayedTask.objects.filter(pk=second.pk).update(status=Status.SUCCEEDED)
    third = schedule(order_cancel, delay=900, args=[1], key="k")
    assert DelayedTask.objects.filter(key="k").count() == 3
    assert DelayedTask.objects.get(key="k", status=Status.SCHEDULED).pk == third.pk


@pytest.mark.parametrize("key", ["", "x" * 201, 42])
def test_bad_keys_are_rejected(key):
    with pytest.raises(InvalidArgument, match="key="):
        schedule(order_cancel, args=[1], key=key)
    assert not DelayedTask.objects.exists()


def test_replace_needs_a_key_and_a_bool():
    with pytest.raises(InvalidArgument, match="replace=True needs key="):
        schedule(order_cancel, args=[1], replace=True)
    with pytest.raises(InvalidArgument, match="True or False"):
        schedule(order_cancel, args=[1], key="k", replace="yes")  # type: ignore[arg-type]
