"""schedule_many(): one INSERT batch, one Redis round trip, all or nothing."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_delayq import Call, schedule, schedule_many
from django_delayq.db.inserts import _has_copy
from django_delayq.exceptions import DuplicateTask, InvalidPayload, InvalidSchedule
from django_delayq.models import DelayedTask
from tests.support.helpers import due_members, expected_score
from tests.testapp.tasks import add, order_cancel, reads_meta, takes_anything

pytestmark = pytest.mark.django_db(transaction=True)


def test_bulk_schedule_writes_every_row_and_member(redis_client):
    calls = [Call(order_cancel, args=[i], delay=60 + i) for i in range(2500)]
    calls.append(Call(add, args=[1, 2], delay=5, key="one"))
    with transaction.atomic():
        tasks = schedule_many(calls)
        assert due_members(redis_client) == {}
    assert len(tasks) == 2501
    assert DelayedTask.objects.count() == 2501
    assert due_members(redis_client) == {
        task.pk: expected_score(task) for task in tasks
    }
    assert {task.shard for task in tasks if task.queue == "orders"} == {0, 1, 2, 3}


def test_rolled_back_bulk_leaves_nothing(redis_client):
    with pytest.raises(RuntimeError), transaction.atomic():
        schedule_many([Call(add, args=[i, i], delay=5) for i in range(10)])
        raise RuntimeError
    assert not DelayedTask.objects.exists()
    assert due_members(redis_client) == {}


def test_one_bad_call_fails_the_whole_batch_before_writing(redis_client):
    calls = [Call(add, args=[1, 1]), Call(add, args=[{1}])]
    with pytest.raises(InvalidPayload, match=r"args\[0\] is a set"):
        schedule_many(calls)
    assert not DelayedTask.objects.exists()


def test_a_key_twice_in_one_batch_is_refused(redis_client):
    with pytest.raises(DuplicateTask, match="items 0 and 2"):
        schedule_many([Call(add, args=[1, 1], key=k) for k in ("a", "b", "a")])
    assert not DelayedTask.objects.exists()


def test_a_key_already_held_fails_the_batch_and_keeps_the_holder(redis_client):
    holder = schedule(add, args=[1, 1], delay=60, key="b")
    with pytest.raises(DuplicateTask, match="key='b'"):
        schedule_many([Call(add, args=[1, 1], key=k, delay=5) for k in ("a", "b")])
    assert list(DelayedTask.objects.values_list("pk", flat=True)) == [holder.pk]
    assert set(due_members(redis_client)) == {holder.pk}


def test_each_call_of_a_batch_has_its_own_metadata(redis_client):
    tasks = schedule_many(
        [Call(order_cancel, args=[i], delay=60, meta={"order": i}) for i in range(50)]
        + [Call(reads_meta, args=["k"], meta={"tenant": "acme"})]
    )
    stored = dict(DelayedTask.objects.values_list("pk", "meta"))
    assert [stored[task.pk] for task in tasks[:50]] == [{"order": i} for i in range(50)]
    assert stored[tasks[50].pk] == {"team": "billing", "tenant": "acme"}


def test_empty_batch_and_wrong_items():
    assert schedule_many([]) == []
    with pytest.raises(TypeError, match="Call objects"):
        schedule_many([(add, [1, 2])])  # type: ignore[list-item]


def test_bulk_rows_read_back_exactly_as_returned(redis_client):
    payloads = [
        ([1, "två", None, True, 2.5], {"nested": {"list": [1, [2, {"x": "é"}]]}}),
        (['quote " back\\slash \t tab \n newline'], {}),
        ([], {"empty": [], "obj": {}}),
    ]
    metas = [{"tenant": "ünï", "ids": [1, 2], "deep": {"a": None}}, None, {}]
    calls = [
        Call(
            takes_anything,
            args=args,
            kwargs=kwargs,
            delay=30,
            key=f"read-back-{n}",
            meta=meta,
        )
        for n, ((args, kwargs), meta) in enumerate(zip(payloads, metas, strict=True))
    ]
    tasks = schedule_many(calls)
    for task in tasks:
        stored = DelayedTask.objects.get(pk=task.pk)
        for field in DelayedTask._meta.concrete_fields:
            assert getattr(stored, field.attname) == getattr(task, field.attname), (
                field.name
            )
        assert not task._state.adding
    # Through COPY on PostgreSQL, INSERT elsewhere: no metadata is NULL.
    assert [task.meta for task in tasks] == [metas[0], None, None]
    assert DelayedTask.objects.filter(meta__isnull=True).count() == 2


def test_bulk_rows_go_through_init_when_someone_listens_to_post_init(redis_client):
    from django.db.models.signals import post_init

    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.pk)

    post_init.connect(receiver, sender=DelayedTask)
    try:
        tasks = schedule_many([Call(add, args=[i, i], delay=5) for i in range(3)])
    finally:
        post_init.disconnect(receiver, sender=DelayedTask)
    assert seen == [task.pk for task in tasks]
    assert DelayedTask.objects.filter(pk__in=seen).count() == 3


def test_bulk_rows_keep_their_expiry_on_every_insert_path(redis_client):
    """PostgreSQL's COPY names every column, as the INSERT elsewhere does."""
    moment = timezone.now() + datetime.timedelta(hours=3, microseconds=250)
    before = timezone.now()
    tasks = schedule_many(
        [
            Call(add, args=[1, 1], delay=60, expires=120),
            Call(add, args=[2, 2], delay=60, expires=datetime.timedelta(hours=1)),
            Call(add, args=[3, 3], delay=60, expires=moment),
            Call(add, args=[4, 4], delay=60),
        ]
    )
    if connection.vendor == "postgresql":
        assert _has_copy(connection)  # the COPY path is the one tested here
    stored = {
        row.pk: row.expires_at
        for row in DelayedTask.objects.filter(pk__in=[t.pk for t in tasks])
    }
    assert stored == {task.pk: task.expires_at for task in tasks}
    seconds, delta, given, none = (stored[task.pk] for task in tasks)
    # Counted from the batch's one "now", which the delays count from too.
    assert seconds - tasks[0].run_at <= datetime.timedelta(seconds=60)
    assert before + datetime.timedelta(seconds=120) <= seconds
    assert delta - seconds == datetime.timedelta(seconds=3600 - 120)
    assert (given, none) == (moment, None)
    assert set(due_members(redis_client)) == {task.pk for task in tasks}


def test_one_bad_expiry_fails_the_whole_batch_before_writing(redis_client):
    calls = [
        Call(add, args=[1, 1], expires=60),
        Call(add, args=[2, 2], delay=90, expires=60),
    ]
    with pytest.raises(InvalidSchedule, match="expires= 60 makes the task expire"):
        schedule_many(calls)
    assert not DelayedTask.objects.exists()
    assert due_members(redis_client) == {}
