"""Property tests of the public calls with careless and hostile input.

For ``schedule()``, ``schedule_many()``, ``cancel()`` and ``reschedule()``,
whatever they are given: either an exception of the package (or a
``TypeError``/``ValueError``) whose message names the argument, with
nothing written and the caller's transaction still usable; or success, with
a row that reads back as the call returned it and, after the commit, a
Redis index that matches the rows.
"""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Any

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from django_delayq import Call, cancel, reschedule, schedule, schedule_many
from django_delayq.exceptions import DelayQueueException
from django_delayq.models import DelayedTask, OutboxEntry, Status
from django_delayq.store.keys import decode_member
from tests.rows.test_payload import json_values
from tests.support.helpers import due_key, expected_score
from tests.testapp.tasks import add, order_cancel, send_reminder

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = settings(
    max_examples=120,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: Text a database may or may not be able to store.
any_text = st.text(max_size=30) | st.sampled_from(
    ["", "\x00", "a\x00b", "\ud800", "x" * 250, "orders", "default", "reports"]
)
#: Anything a careless caller may pass where a value is expected.
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    st.floats(),  # nan and inf included
    any_text,
    st.binary(max_size=8),
    st.just(object()),
    st.sets(st.integers(), max_size=2),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.integers(), st.integers(), max_size=2),
    st.just(datetime.date(2030, 1, 1)),
    st.just(uuid.UUID(int=1)),
)


def mostly(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any]) -> Any:
    """``valid`` seven times in eight: most examples get past most checks,
    so every check meets bad input on its own, and calls succeed too."""
    # A middle value picks the invalid branch: hypothesis favours the ends
    # of a range (and shrinks towards its start).
    return st.integers(0, 7).flatmap(lambda n: invalid if n == 3 else valid)


storable = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
    min_size=1,
    max_size=20,
)
tasks = mostly(
    st.sampled_from([add, order_cancel, send_reminder, "reminders.send"]), junk
)
delays = mostly(
    st.none()
    | st.floats(0, 10**6)
    | st.integers(0, 10**6)
    | st.timedeltas(datetime.timedelta(0), datetime.timedelta(days=1000)),
    junk | st.floats() | st.just(10**400) | st.timedeltas(),
)
etas = mostly(
    st.none(),
    st.datetimes(timezones=st.just(datetime.UTC) | st.none())
    | st.just(datetime.datetime.max.replace(tzinfo=datetime.UTC))
    | junk,
)
payload_args = mostly(
    st.lists(json_values, max_size=3), st.lists(junk, max_size=2) | junk
)
payload_kwargs = mostly(
    st.none() | st.dictionaries(st.text(max_size=5), json_values, max_size=3),
    st.dictionaries(any_text, junk, max_size=2) | junk,
)
keys = mostly(st.none() | storable, any_text | junk)
queues = mostly(
    st.none() | st.sampled_from(["orders", "default"]), st.just("nope") | junk
)
attempts = mostly(st.none() | st.integers(1, 10), st.integers(-2, 2000) | junk)
priorities = mostly(
    st.none() | st.integers(-100, 100), st.integers(-1000, 1000) | st.booleans() | junk
)
# replace=True needs a key, which most examples have not.
replaces = mostly(st.sampled_from([False, False, False, True]), junk)

#: Words that name each argument in the package's messages.
NAMES = {
    "task": ("task", "name", "registered", "schedule"),
    "args": ("args",),
    "kwargs": ("kwargs",),
    "delay": ("delay",),
    "eta": ("eta",),
    "queue": ("queue",),
    "key": ("key",),
    "max_attempts": ("max_attempts",),
    "priority": ("priority",),
    "replace": ("replace",),
}

#: What a refusal may be: the package's exceptions, or the built-in ones a
#: programming error gets (documented in docs/reference/exceptions.md).
REFUSALS = (DelayQueueException, TypeError, ValueError, LookupError)


def names_an_argument(message: str) -> bool:
    return any(word in message for words in NAMES.values() for word in words)


def outcome(call: Any) -> tuple[Any, BaseException | None]:
    """What ``call()`` returned, or the refusal it raised."""
    try:
        result = call()
    except REFUSALS as exc:
        event(f"refused: {type(exc).__name__}")
        return None, exc
    event("accepted")
    return result, None


def still_usable() -> None:
    """The caller's transaction (or autocommit) still runs statements."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


def as_json(value: Any) -> str:
    return json.dumps(value)


def check_index(redis_client: Any) -> None:
    """After the commit: the due-sets index exactly the scheduled rows, at
    their run_at, each in its priority's band's due-set (or the outbox
    holds what Redis could not take)."""
    pending = set(OutboxEntry.objects.values_list("task_id", flat=True))
    scheduled = {
        (due_key(row.queue, row.shard, row.priority), row.pk.bytes): expected_score(row)
        for row in DelayedTask.objects.filter(status=Status.SCHEDULED)
        if row.pk not in pending
    }
    indexed = {
        (key.decode(), member): int(score)
        for key in redis_client.scan_iter(match="delayq:*:due*")
        for member, score in redis_client.zrange(key, 0, -1, withscores=True)
        if decode_member(member) not in pending
    }
    assert indexed == scheduled


def reset(redis_client: Any) -> None:
    DelayedTask.objects.all().delete()
    OutboxEntry.objects.all().delete()
    redis_client.flushall()


@EXAMPLES
@given(
    task=tasks,
    args=payload_args,
    kwargs=payload_kwargs,
    delay=delays,
    eta=etas,
    queue=queues,
    key=keys,
    max_attempts=attempts,
    priority=priorities,
    replace=replaces,
)
def test_schedule_either_refuses_cleanly_or_writes_what_it_returns(
    redis_client,
    task,
    args,
    kwargs,
    delay,
    eta,
    queue,
    key,
    max_attempts,
    priority,
    replace,
):
    reset(redis_client)
    with transaction.atomic():
        row, refused = outcome(
            lambda: schedule(
                task,
                args=args,
                kwargs=kwargs,
                delay=delay,
                eta=eta,
                queue=queue,
                key=key,
                replace=replace,
                max_attempts=max_attempts,
                priority=priority,
            )
        )
        if refused is not None:
            assert names_an_argument(str(refused)), repr(refused)
            still_usable()
        else:
            stored = DelayedTask.objects.get(pk=row.pk)
            assert as_json(stored.args) == as_json(row.args)
            assert as_json(stored.kwargs) == as_json(row.kwargs)
            assert (stored.run_at, stored.queue, stored.key) == (
                row.run_at,
                row.queue,
                row.key,
            )
            assert stored.max_attempts == row.max_attempts
            assert stored.priority == row.priority
            assert -100 <= stored.priority <= 100
    if refused is not None:
        assert not DelayedTask.objects.exists()
        assert redis_client.dbsize() == 0
    check_index(redis_client)


@EXAMPLES
@given(
    calls=mostly(
        st.lists(
            st.builds(
                Call,
                task=tasks,
                args=payload_args,
                kwargs=payload_kwargs,
                delay=delays,
                queue=queues,
                key=keys,
                max_attempts=attempts,
                priority=priorities,
            ),
            min_size=1,
            max_size=4,
        ),
        st.lists(junk, max_size=2),
    )
)
def test_schedule_many_is_all_or_nothing(redis_client, calls):
    reset(redis_client)
    rows, refused = outcome(lambda: schedule_many(calls))
    if refused is not None:
        assert names_an_argument(str(refused)) or "Call" in str(refused), repr(refused)
        still_usable()
        assert not DelayedTask.objects.exists()
        assert redis_client.dbsize() == 0
        return
    assert len(rows) == len(calls)
    for row in rows:
        stored = DelayedTask.objects.get(pk=row.pk)
        assert as_json(stored.args) == as_json(row.args)
        assert as_json(stored.kwargs) == as_json(row.kwargs)
        assert stored.run_at == row.run_at
        assert stored.priority == row.priority
    check_index(redis_client)


@EXAMPLES
@given(
    target=mostly(st.sampled_from(["the task", "its id", "its id as text"]), junk),
    key=mostly(st.none() | st.just("order:1"), any_text | junk),
    delay=delays,
    eta=etas,
    cancel_it=st.booleans(),
)
def test_cancel_and_reschedule_change_nothing_when_they_refuse(
    redis_client, target, key, delay, eta, cancel_it
):
    reset(redis_client)
    row = schedule(order_cancel, args=[1], delay=60, key="order:1")
    chosen = (
        {
            "the task": row,
            "its id": row.pk,
            "its id as text": str(row.pk),
        }.get(target, target)
        if isinstance(target, str)
        else target
    )
    before = DelayedTask.objects.get(pk=row.pk)

    def call() -> None:
        with transaction.atomic():
            if cancel_it:
                done = cancel(chosen, key=key) if key is not None else cancel(chosen)
                assert isinstance(done, bool)
            elif key is not None:
                moved = reschedule(key=key, delay=delay, eta=eta)
                assert DelayedTask.objects.get(pk=moved.pk).run_at == moved.run_at
            else:
                moved = reschedule(chosen, delay=delay, eta=eta)
                assert DelayedTask.objects.get(pk=moved.pk).run_at == moved.run_at

    _, refused = outcome(call)
    if refused is not None:
        message = str(refused)
        assert names_an_argument(message) or "task" in message.lower(), repr(refused)
        still_usable()
        after = DelayedTask.objects.get(pk=row.pk)
        assert (after.status, after.run_at) == (before.status, before.run_at)
    check_index(redis_client)
