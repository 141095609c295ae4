"""The async API from async views, under Django's AsyncClient: the same
arguments, errors and transaction semantics as the sync API."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.test import AsyncClient
from django.utils import timezone

from django_delayq import aschedule, aschedule_many, schedule, schedule_many
from django_delayq.api import Call
from django_delayq.exceptions import (
    DuplicateTask,
    InvalidArgument,
    InvalidPayload,
    InvalidSchedule,
    InvalidTaskState,
    TaskNotFound,
    TaskNotRegistered,
    UnknownQueue,
)
from django_delayq.models import DelayedTask, Status
from tests.support.helpers import (
    drain,
    due_members,
    expected_score,
    indexed_score,
    refresh,
)
from tests.testapp.tasks import (
    add,
    always_fails,
    order_cancel,
    reads_meta,
    send_reminder,
)
from tests.testapp.views import ViewFailed

pytestmark = pytest.mark.django_db(transaction=True)


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` as JSON to an async view and return its JSON answer.

    Called from the test's thread through ``async_to_sync``, as Django runs
    an async test: the view's thread-sensitive calls run on this thread.
    """
    response = async_to_sync(AsyncClient().post)(
        url, json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 200, response.content
    answer: dict[str, Any] = response.json()
    return answer


def test_aschedule_writes_the_row_and_indexes_it(redis_client):
    answer = post(
        "/async/schedule/",
        {"task": order_cancel.name, "args": [42], "delay": 900, "key": "order:42"},
    )
    row = DelayedTask.objects.get(pk=answer["id"])
    assert answer["status"] == row.status == Status.SCHEDULED
    assert (row.name, row.queue, row.args, row.key) == (
        order_cancel.name,
        "orders",
        [42],
        "order:42",
    )
    assert row.max_attempts == 5
    assert due_members(redis_client) == {row.pk: expected_score(row)}


def test_aschedule_in_a_transaction_that_commits_indexes_at_the_commit(
    redis_client,
):
    with transaction.atomic():
        answer = post("/async/schedule/", {"task": add.name, "args": [1, 2]})
        # The view wrote in this transaction: not in Redis before it commits.
        assert due_members(redis_client) == {}
    row = DelayedTask.objects.get(pk=answer["id"])
    assert indexed_score(redis_client, row) == expected_score(row)


def test_aschedule_in_a_transaction_rolled_back_leaves_nothing(redis_client):
    with pytest.raises(RuntimeError), transaction.atomic():
        post("/async/schedule/", {"task": add.name, "args": [1, 2]})
        raise RuntimeError("the caller failed")
    assert not DelayedTask.objects.exists()
    assert due_members(redis_client) == {}


def test_a_view_transaction_around_aschedule_commits_then_indexes(redis_client):
    answer = post("/async/schedule-in-transaction/", {"task": add.name, "args": [3, 4]})
    row = DelayedTask.objects.get(pk=answer["id"])
    assert due_members(redis_client) == {row.pk: expected_score(row)}


def test_a_view_that_fails_after_aschedule_rolls_the_task_back(redis_client):
    with pytest.raises(ViewFailed):
        post(
            "/async/schedule-in-transaction/",
            {"task": add.name, "args": [3, 4], "fail": True},
        )
    assert not DelayedTask.objects.exists()
    assert due_members(redis_client) == {}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"args": [1, 2], "delay": -1}, InvalidSchedule),
        ({"args": [1, 2], "delay": "10"}, InvalidSchedule),
        ({"args": [1, 2], "expires": 0}, InvalidSchedule),
        ({"args": [1, 2], "expires": "soon"}, InvalidSchedule),
        ({"args": [1, 2], "queue": "nope"}, UnknownQueue),
        ({"args": [1, 2], "max_attempts": 0}, InvalidArgument),
        ({"args": [1, 2], "priority": 101}, InvalidArgument),
        ({"args": [1, 2], "key": ""}, InvalidArgument),
        ({"args": [1, 2], "replace": True}, InvalidArgument),
        ({"args": [1, 2], "replace": "yes", "key": "k"}, InvalidArgument),
        ({"args": [1]}, TypeError),
        ({"args": [1, 2], "kwargs": {"c": 3}}, TypeError),
        ({"args": ["a\x00b", 2]}, InvalidPayload),
        ({"args": [1, 2], "task": "no.such.task"}, TaskNotRegistered),
    ],
)
def test_bad_input_raises_what_schedule_raises_and_writes_nothing(
    redis_client, body, error
):
    body = {"task": add.name, **body}
    with pytest.raises(error) as from_sync:
        schedule(**{"fn_or_name": body["task"]}, **_options(body))
    with pytest.raises(error) as from_view:
        post("/async/schedule/", body)
    assert str(from_view.value) == str(from_sync.value)
    assert type(from_view.value) is type(from_sync.value)
    assert not DelayedTask.objects.exists()
    assert due_members(redis_client) == {}


def _options(body: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in body.items() if name != "task"}


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"args": [{1, 2}]}, InvalidPayload),
        ({"eta": datetime.datetime(2030, 1, 1, 12, 0)}, InvalidSchedule),
        ({"args": [1, 2], "delay": 5, "eta": timezone.now()}, InvalidSchedule),
        (
            {"args": [1, 2], "expires": datetime.datetime(2030, 1, 1, 12, 0)},
            InvalidSchedule,
        ),
    ],
    ids=["set-argument", "naive-eta", "delay-and-eta", "naive-expires"],
)
def test_input_json_cannot_carry_is_refused_as_schedule_refuses_it(
    redis_client, options, error
):
    with pytest.raises(error) as from_sync:
        schedule(add, **options)
    with pytest.raises(error) as from_async:
        async_to_sync(aschedule)(add, **options)
    assert str(from_async.value) == str(from_sync.value)
    assert type(from_async.value) is type(from_sync.value)
    assert not DelayedTask.objects.exists()


def test_a_held_key_raises_duplicate_task_and_replace_takes_it_over(redis_client):
    holder = schedule(send_reminder, args=[1], key="remind:1", delay=60)
    with pytest.raises(DuplicateTask) as refused:
        post(
            "/async/schedule/",
            {"task": send_reminder.name, "args": [1], "key": "remind:1"},
        )
    assert refused.value.key == "remind:1"
    assert refused.value.existing_id == holder.pk
    assert "Pass replace=True" in str(refused.value)
    assert due_members(redis_client) == {holder.pk: expected_score(holder)}

    answer = post(
        "/async/schedule/",
        {"task": send_reminder.name, "args": [1], "key": "remind:1", "replace": True},
    )
    assert refresh(holder).status == Status.CANCELLED
    replacement = DelayedTask.objects.get(pk=answer["id"])
    assert replacement.key == "remind:1"
    assert due_members(redis_client) == {replacement.pk: expected_score(replacement)}


def test_aschedule_many_writes_the_batch_and_indexes_it(redis_client):
    calls = [
        {"task": send_reminder.name, "args": [n], "key": f"remind:{n}", "delay": 60}
        for n in range(3)
    ]
    answer = post("/async/schedule-many/", {"calls": calls})
    rows = DelayedTask.objects.filter(pk__in=answer["ids"])
    assert sorted(row.key for row in rows) == ["remind:0", "remind:1", "remind:2"]
    assert due_members(redis_client) == {row.pk: expected_score(row) for row in rows}


def test_aschedule_many_refuses_what_schedule_many_refuses(redis_client):
    calls = [{"task": send_reminder.name, "args": [n], "key": "same"} for n in (1, 2)]
    with pytest.raises(DuplicateTask) as from_sync:
        schedule_many([Call(**_options(c), task=c["task"]) for c in calls])
    with pytest.raises(DuplicateTask) as from_view:
        post("/async/schedule-many/", {"calls": calls})
    assert str(from_view.value) == str(from_sync.value)
    # Not a Call: the same TypeError, naming the item.
    with pytest.raises(TypeError, match="item 0 is a dict"):
        async_to_sync(aschedule_many)([{"task": add.name}])
    assert not DelayedTask.objects.exists()
    assert due_members(redis_client) == {}


def test_acancel_by_key_cancels_and_removes_the_member(redis_client):
    task = schedule(order_cancel, args=[7], key="order:7", delay=900)
    assert post("/async/cancel/", {"key": "order:7"}) == {"cancelled": True}
    assert refresh(task).status == Status.CANCELLED
    assert due_members(redis_client) == {}
    # Nothing left to cancel: False, as cancel() says.
    assert post("/async/cancel/", {"id": str(task.pk)}) == {"cancelled": False}


def test_acancel_refuses_what_cancel_refuses(redis_client):
    with pytest.raises(InvalidArgument, match="exactly one"):
        post("/async/cancel/", {})


def test_areschedule_moves_the_row_and_the_score(redis_client):
    task = schedule(order_cancel, args=[7], delay=900)
    answer = post("/async/reschedule/", {"id": str(task.pk), "delay": 60})
    row = refresh(task)
    assert row.run_at < task.run_at
    assert datetime.datetime.fromisoformat(answer["run_at"]) == row.run_at
    assert indexed_score(redis_client, row) == expected_score(row)


def test_areschedule_refuses_an_unknown_or_finished_task(redis_client):
    with pytest.raises(TaskNotFound):
        post("/async/reschedule/", {"key": "nobody", "delay": 60})
    task = schedule(order_cancel, args=[7], delay=900)
    post("/async/cancel/", {"id": str(task.pk)})
    with pytest.raises(InvalidTaskState):
        post("/async/reschedule/", {"id": str(task.pk), "delay": 60})


def test_aretry_schedules_a_failed_task_again(redis_client, settings):
    settings.DELAYQ = {**settings.DELAYQ, "RETRY_BACKOFF": 0.0}
    failed = schedule(always_fails, args=["boom"], max_attempts=1)
    drain()
    assert refresh(failed).status == Status.FAILED
    answer = post("/async/retry/", {"id": str(failed.pk), "delay": 60})
    row = refresh(failed)
    assert answer == {"id": str(failed.pk), "status": Status.SCHEDULED}
    assert (row.status, row.attempts) == (Status.SCHEDULED, 0)
    assert indexed_score(redis_client, row) == expected_score(row)
    # Retrying it again, while scheduled, is refused as retry() refuses it.
    with pytest.raises(InvalidTaskState):
        post("/async/retry/", {"id": str(failed.pk)})


def test_aschedule_and_aschedule_many_write_the_expiry(redis_client):
    before = timezone.now()
    answer = post(
        "/async/schedule/",
        {"task": add.name, "args": [1, 2], "delay": 60, "expires": 300},
    )
    many = post(
        "/async/schedule-many/",
        {"calls": [{"task": add.name, "args": [3, 4], "expires": 30.5}]},
    )
    after = timezone.now()
    first = DelayedTask.objects.get(pk=answer["id"])
    second = DelayedTask.objects.get(pk=many["ids"][0])
    span = datetime.timedelta(seconds=300)
    assert before + span <= first.expires_at <= after + span
    span = datetime.timedelta(seconds=30.5)
    assert before + span <= second.expires_at <= after + span
    moment = timezone.now() + datetime.timedelta(days=1)
    task = async_to_sync(order_cancel.aschedule)(args=[9], expires=moment)
    assert refresh(task).expires_at == moment


def test_task_aschedule_takes_the_options_of_aschedule(redis_client):
    task = async_to_sync(order_cancel.aschedule)(args=[9], delay=900, priority=5)
    row = refresh(task)
    assert (row.name, row.args, row.priority) == (order_cancel.name, [9], 5)
    assert indexed_score(redis_client, row) == expected_score(row)


def test_a_tasks_framework_task_enqueues_from_an_async_view(redis_client):
    with transaction.atomic():
        answer = post("/async/enqueue/", {"args": [20, 22]})
        assert answer["status"] == "READY"
        assert due_members(redis_client) == {}  # indexed at the commit
    row = DelayedTask.objects.get(pk=answer["id"])
    assert row.args == [20, 22]
    assert indexed_score(redis_client, row) == expected_score(row)
    drain()
    assert refresh(row).result == 42


def test_the_async_api_takes_metadata_as_the_sync_api_does(redis_client):
    one = post(
        "/async/schedule/",
        {"task": order_cancel.name, "args": [7], "delay": 900, "meta": {"t": "a"}},
    )
    many = post(
        "/async/schedule-many/",
        {"calls": [{"task": add.name, "args": [1, 2], "meta": {"t": "b"}}]},
    )
    assert refresh_meta(one["id"]) == {"t": "a"}
    assert refresh_meta(many["ids"][0]) == {"t": "b"}
    post("/async/reschedule/", {"id": one["id"], "delay": 60, "meta": {"t": "c"}})
    assert refresh_meta(one["id"]) == {"t": "c"}
    with pytest.raises(InvalidPayload, match=r"meta\['t'\] is a"):
        async_to_sync(aschedule)(add, args=[1, 2], meta={"t": datetime.date.today()})
    assert DelayedTask.objects.count() == 2


def refresh_meta(task_id: str) -> Any:
    return DelayedTask.objects.get(pk=task_id).meta


def test_a_request_id_goes_from_an_async_view_to_the_task_and_its_run(
    redis_client, settings
):
    """The recipe of the execution guide: a Django middleware sets the
    request id, the delayq middleware's on_schedule() copies it into the
    task's metadata, and its __call__ puts it back around each run."""
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        "tests.testapp.middleware.RequestIdFromHeader",
    ]
    settings.DELAYQ = {
        **settings.DELAYQ,
        "MIDDLEWARE": ["tests.testapp.middleware.RequestId"],
    }
    response = async_to_sync(AsyncClient().post)(
        "/async/schedule/",
        json.dumps({"task": reads_meta.name, "args": ["from-a-view"]}),
        content_type="application/json",
        headers={"X-Request-ID": "req-7"},
    )
    task_id = response.json()["id"]
    assert refresh_meta(task_id) == {
        "team": "billing",
        "tenant": "default",
        "request_id": "req-7",
    }
    drain()
    row = DelayedTask.objects.get(pk=task_id)
    assert row.status == Status.SUCCEEDED
    assert row.result["request_id"] == "req-7"
    # Outside a request, nothing is added.
    assert schedule(reads_meta, args=["no-request"]).meta == {
        "team": "billing",
        "tenant": "default",
    }
