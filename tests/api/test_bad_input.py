"""Every bad input raises a precise error and writes nothing anywhere."""

from __future__ import annotations

import datetime
import math

import pytest
from django.db import transaction

from django_delayq import Call, schedule, schedule_many
from django_delayq.exceptions import (
    DelayQueueException,
    InvalidArgument,
    InvalidPayload,
    InvalidSchedule,
    PayloadTooLarge,
    TaskNotRegistered,
    UnknownQueue,
    UnsupportedPayloadType,
)
from django_delayq.models import DelayedTask, OutboxEntry
from tests.support.helpers import due_members
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)

NAIVE = datetime.datetime(2030, 1, 1, 12, 0)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"args": [{1, 2}]}, InvalidPayload, r"args\[0\] is a set"),
        ({"args": [datetime.datetime(2030, 1, 1)]}, InvalidPayload, "isoformat"),
        ({"args": [object()]}, InvalidPayload, "not JSON serializable"),
        ({"args": [math.nan]}, InvalidPayload, "nan"),
        ({"kwargs": {"b": math.inf}}, InvalidPayload, "inf"),
        ({"args": ["x" * 70_000]}, PayloadTooLarge, "MAX_PAYLOAD_BYTES"),
        ({"args": 5}, InvalidPayload, "list or tuple"),
        ({"delay": -1}, InvalidSchedule, "negative"),
        ({"delay": math.nan}, InvalidSchedule, "finite"),
        ({"delay": math.inf}, InvalidSchedule, "finite"),
        ({"delay": "10"}, InvalidSchedule, "number of seconds"),
        ({"eta": NAIVE}, InvalidSchedule, "timezone-aware"),
        (
            {"delay": 5, "eta": datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)},
            InvalidSchedule,
            "not both",
        ),
        ({"queue": "nope"}, UnknownQueue, r"queue='nope' is not configured"),
        ({"queue": ""}, UnknownQueue, r"queue='' is not configured"),
        ({"max_attempts": 1001}, InvalidArgument, "max_attempts"),
        ({"max_attempts": 0}, InvalidArgument, "max_attempts"),
        ({"key": ""}, InvalidArgument, "key="),
        # What PostgreSQL cannot store, or no database: refused before writing.
        ({"args": ["a\x00b"]}, InvalidPayload, r"args\[0\] contains a NUL"),
        ({"kwargs": {"b": "\ud800"}}, InvalidPayload, r"\['b'\] contains a lone"),
        ({"kwargs": {"a\x00": 1}}, InvalidPayload, "kwargs= key 'a.x00' contains"),
        ({"args": [{"k\udc80": 1}]}, InvalidPayload, r"args\[0\] key .* surrogate"),
        ({"key": "k\x00"}, InvalidArgument, "key= contains a NUL"),
        ({"key": "\ud800"}, InvalidArgument, "key= contains a lone surrogate"),
        ({"queue": ["x"]}, InvalidArgument, r"queue= must be a queue name.*list"),
        ({"delay": 10**400}, InvalidSchedule, "an int of 1329 bits is more than 100"),
        ({"delay": 10**5000}, InvalidSchedule, "more than 100 years"),
        ({"delay": -(10**400)}, InvalidSchedule, "cannot be negative"),
        (
            {"eta": datetime.datetime.max.replace(tzinfo=datetime.UTC)},
            InvalidSchedule,
            "9999-12-31T23:59:59.999999[+]00:00 is more than 100 years from now",
        ),
        (
            {"eta": datetime.datetime(9999, 1, 1, tzinfo=datetime.UTC)},
            InvalidSchedule,
            "more than 100 years",
        ),
        # expires=: seconds or a timedelta from now, or an aware datetime,
        # after the task is due.
        ({"expires": 0}, InvalidSchedule, "expires= must be more than 0 seconds"),
        ({"expires": -5}, InvalidSchedule, "expires= must be more than 0 seconds"),
        (
            {"expires": datetime.timedelta(0)},
            InvalidSchedule,
            "expires= must be more than 0 seconds",
        ),
        ({"expires": True}, InvalidSchedule, "expires= must be a number of seconds"),
        ({"expires": "60"}, InvalidSchedule, r"expires= must be a number.*str"),
        ({"expires": math.nan}, InvalidSchedule, "expires= must be a finite"),
        ({"expires": math.inf}, InvalidSchedule, "expires= must be a finite"),
        ({"expires": 10**400}, InvalidSchedule, "expires= of an int of 1329 bits"),
        ({"expires": NAIVE}, InvalidSchedule, r"expires= must be timezone-aware"),
        (
            {"delay": 900, "expires": 600},
            InvalidSchedule,
            r"expires= 600 makes the task expire at .* \(counted from now, the "
            r"call, not from when it is due\), not after it is due at .*: it "
            r"could never run",
        ),
        (
            {"delay": 60, "expires": 60},
            InvalidSchedule,
            "could never run",
        ),
        (
            {"expires": datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)},
            InvalidSchedule,
            r"expires= .* makes the task expire at 2020-01-01T00:00:00[+]00:00, "
            r"not after it is due",
        ),
        (
            {
                "eta": datetime.datetime(2031, 1, 1, tzinfo=datetime.UTC),
                "expires": datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC),
            },
            InvalidSchedule,
            "not after it is due at 2031-01-01T00:00:00[+]00:00",
        ),
        (
            {"expires": datetime.datetime(9999, 1, 1, tzinfo=datetime.UTC)},
            InvalidSchedule,
            "expires= .* is more than 100 years from now",
        ),
        # A placeholder for a missing time, not a moment: a timestamp of 0.
        (
            {"eta": datetime.datetime.fromtimestamp(0, datetime.UTC)},
            InvalidSchedule,
            r"eta= .*1970-01-01T00:00:00[+]00:00 is before 2000-01-01.*pass "
            r"neither eta= nor delay=",
        ),
        (
            {"eta": datetime.datetime.min.replace(tzinfo=datetime.UTC)},
            InvalidSchedule,
            "0001-01-01T00:00:00[+]00:00 is before 2000-01-01",
        ),
        # Metadata: a dict of JSON with str keys, at most 4 KiB of it.
        (
            {"meta": ["acme"]},
            UnsupportedPayloadType,
            r"meta= must be a dict of metadata \(str keys, JSON values\), not list",
        ),
        ({"meta": "acme"}, UnsupportedPayloadType, "meta= must be a dict"),
        ({"meta": {1: "acme"}}, UnsupportedPayloadType, "meta has the key 1 .int."),
        ({"meta": {"at": NAIVE}}, UnsupportedPayloadType, r"meta\['at'\] is a date"),
        ({"meta": {"ids": {1, 2}}}, UnsupportedPayloadType, r"meta\['ids'\] is a set"),
        ({"meta": {"x": math.nan}}, InvalidPayload, r"meta\['x'\] is nan"),
        ({"meta": {"x": "a\x00"}}, InvalidPayload, r"meta\['x'\] contains a NUL"),
        (
            {"meta": {"blob": "x" * 4086}},
            PayloadTooLarge,
            r"^meta= encodes to 4097 bytes of JSON, over the metadata limit of "
            r"4096\. Keep short ids and names in meta=",
        ),
        ({"meta": {"blob": "x" * 9000}}, PayloadTooLarge, "more than 4096 bytes"),
    ],
)
def test_bad_input_raises_and_writes_nothing(redis_client, kwargs, error, message):
    call = {"args": [1, 2], **kwargs}
    with transaction.atomic():
        with pytest.raises(error, match=message) as caught:
            schedule(add, **call)
        assert isinstance(caught.value, DelayQueueException)
    assert not DelayedTask.objects.exists()
    assert not OutboxEntry.objects.exists()
    assert due_members(redis_client) == {}


def test_a_value_json_cannot_hold_is_refused_in_the_words_of_django_backends(
    redis_client,
):
    """Django's normalize_json() words first, then the place and the fix,
    from every entry point."""
    when = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    expected = (
        "args[1] is a datetime, which is not JSON serializable; pass "
        "value.isoformat() and parse it in the task. (Unsupported type: "
        "<class 'datetime.datetime'>)"
    )
    for attempt in [
        lambda: schedule(add, args=[1, when]),
        lambda: add.schedule(args=[1, when]),
        lambda: schedule_many([Call(add, args=[1, 2]), Call(add, args=[1, when])]),
    ]:
        with pytest.raises(UnsupportedPayloadType) as caught:
            attempt()
        assert isinstance(caught.value, TypeError)
        assert str(caught.value) == expected
    assert not DelayedTask.objects.exists()
    assert due_members(redis_client) == {}


def test_unregistered_task_name_raises_and_writes_nothing(redis_client):
    with pytest.raises(TaskNotRegistered, match=r"shop\.tasks\.typo"):
        schedule("shop.tasks.typo", args=[1])
    assert not DelayedTask.objects.exists()
    assert due_members(redis_client) == {}


def test_manual_transaction_management_is_refused_before_writing(redis_client):
    transaction.set_autocommit(False)
    try:
        with pytest.raises(transaction.TransactionManagementError, match="atomic"):
            schedule(add, args=[1, 2])
    finally:
        transaction.rollback()
        transaction.set_autocommit(True)
    assert not DelayedTask.objects.exists()


def test_metadata_of_up_to_4_kib_of_json_is_accepted(redis_client):
    """``{"blob":"x...x"}``: 11 bytes around the text."""
    task = schedule(add, args=[1, 2], meta={"blob": "x" * 4085})
    assert len(DelayedTask.objects.get(pk=task.pk).meta["blob"]) == 4085


def test_bad_metadata_in_a_batch_fails_it_before_writing(redis_client):
    calls = [Call(add, args=[1, 1], meta={"ok": 1}), Call(add, args=[1, 1], meta=[1])]
    with pytest.raises(UnsupportedPayloadType, match="meta= must be a dict"):
        schedule_many(calls)
    assert not DelayedTask.objects.exists()
    assert due_members(redis_client) == {}


def test_payload_errors_are_also_value_errors_and_schedule_errors_too():
    with pytest.raises(ValueError, match="is a set"):
        schedule(add, args=[{1}])
    with pytest.raises(ValueError, match="negative"):
        schedule(add, args=[1, 2], delay=-3)
    with pytest.raises(LookupError, match="not configured"):
        schedule(add, args=[1, 2], queue="missing")


@pytest.mark.parametrize(
    "bad",
    [
        {"args": ["a\x00b"]},
        {"kwargs": {"note": "\udcff"}},
        {"key": "order-\x00"},
        {"queue": ["orders"]},
        {"delay": 10**400},
        {"meta": {"tenant": {"acme"}}},
        {"delay": 60, "expires": 30},
    ],
)
def test_the_callers_transaction_stays_usable_after_bad_input(redis_client, bad):
    """Refused before any statement, so even on PostgreSQL the transaction
    is not aborted: the caller goes on and commits."""
    from django_delayq import cancel

    with transaction.atomic():
        with pytest.raises(DelayQueueException):
            schedule(add, **{"args": [1, 2], **bad})
        with pytest.raises(InvalidArgument, match="lone surrogate"):
            cancel(key="\ud800")
        task = schedule(add, args=[1, 2])
    assert list(DelayedTask.objects.values_list("pk", flat=True)) == [task.pk]
    assert list(due_members(redis_client)) == [task.pk]
