"""The Celery kit's task API: a Celery-style tasks module
(tests/testapp/celery_style.py) scheduled and run through django-delayq,
retries counted as Celery counts them, and every refused option's error."""

from __future__ import annotations

import datetime
import itertools
import uuid
from typing import Any

import pytest
import time_machine
from django.core.checks import run_checks
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_delayq import registry
from django_delayq.contrib.celery import (
    AsyncResult,
    MaxRetriesExceededError,
    NotSupported,
    Retry,
    TaskFailed,
    TaskRevokedError,
    chain,
    group,
    shared_task,
)
from django_delayq.exceptions import (
    InvalidArgument,
    InvalidSchedule,
    InvalidTaskDefinition,
    InvalidTaskState,
)
from django_delayq.models import DelayedTask, Status
from django_delayq.testing import run_due, test_mode
from tests.testapp import celery_style
from tests.testapp.celery_style import (
    add,
    breaks,
    call_gateway,
    fire_and_forget,
    naive_eta,
    reads_headers,
    retries_beyond,
    retry_without_throw,
    send_reminder,
    updates_state,
)
from tests.testapp.models import Ledger

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture(autouse=True)
def _manual() -> Any:
    celery_style.calls.clear()
    # Tasks a test defines are unregistered after it: a limited one would
    # give its queue a limits shard in every later test of the process.
    registered = set(registry.all_tasks())
    try:
        with test_mode("manual"):
            yield
    finally:
        for name in set(registry.all_tasks()) - registered:
            registry.unregister(name)


def later(seconds: float) -> datetime.datetime:
    return timezone.now() + datetime.timedelta(seconds=seconds)


# -- scheduling ----------------------------------------------------------------


def test_delay_schedules_a_row_that_runs_now_and_get_returns_its_value() -> None:
    result = add.delay(2, 3)
    row = DelayedTask.objects.get(pk=result.id)
    assert (row.name, row.args, row.status) == (add.name, [2, 3], Status.SCHEDULED)
    assert (result.state, result.ready()) == ("PENDING", False)
    run_due()
    assert (result.state, result.ready(), result.successful()) == (
        "SUCCESS",
        True,
        True,
    )
    assert result.get(timeout=1) == 5
    assert result.result == 5
    assert add.name == "tests.testapp.celery_style.add"  # Celery's default name


def test_apply_async_with_countdown_queue_and_priority() -> None:
    before = timezone.now()
    result = add.apply_async(args=[1], kwargs={"y": 2}, countdown=900, priority=7)
    row = DelayedTask.objects.get(pk=result.id)
    assert row.kwargs == {"y": 2}
    assert row.priority == 7
    assert before + datetime.timedelta(seconds=899) < row.run_at
    assert row.run_at < timezone.now() + datetime.timedelta(seconds=901)
    assert run_due() == []  # not due yet
    assert [ran.outcome for ran in run_due(until=later(901))] == ["succeeded"]
    assert AsyncResult(result.id).get(timeout=1) == 3


def test_apply_async_with_eta_and_a_task_queue() -> None:
    eta = later(3600)
    result = fire_and_forget.apply_async(args=["eta"], eta=eta)
    row = DelayedTask.objects.get(pk=result.id)
    assert (row.queue, row.priority) == ("orders", 5)
    assert abs((row.run_at - eta).total_seconds()) < 0.002


def test_apply_async_headers_are_the_tasks_metadata_and_its_request_s() -> None:
    with_headers = reads_headers.apply_async(headers={"tenant": "acme"}, countdown=0)
    without = reads_headers.delay()
    row = DelayedTask.objects.get(pk=with_headers.id)
    assert row.meta == {"tenant": "acme"}
    run_due()
    assert with_headers.get(timeout=1) == {"tenant": "acme"}
    assert without.get(timeout=1) is None  # as Celery's, without headers
    with pytest.raises(ValueError, match=r"meta\['at'\] is a set"):
        reads_headers.apply_async(headers={"at": {1}})


def test_apply_async_expires_counts_seconds_from_now_or_takes_a_datetime() -> None:
    before = timezone.now()
    in_seconds = DelayedTask.objects.get(
        pk=add.apply_async(args=[1, 2], countdown=60, expires=120).id
    )
    after = timezone.now()
    span = datetime.timedelta(seconds=120)
    # From the call, as Celery counts it: not from the countdown's end.
    assert before + span <= in_seconds.expires_at <= after + span
    moment = later(3600)
    at = DelayedTask.objects.get(pk=add.apply_async(args=[1, 2], expires=moment).id)
    assert at.expires_at == moment
    # An expiry before the task is due: Celery would revoke it on arrival;
    # here the call is refused, and nothing is written.
    with pytest.raises(InvalidSchedule, match="expires= 30 makes the task expire"):
        add.apply_async(args=[1, 2], countdown=60, expires=30)
    assert DelayedTask.objects.count() == 2


def test_an_expired_task_is_revoked_without_running() -> None:
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        result = send_reminder.apply_async(args=["late"], expires=60)
        traveller.shift(datetime.timedelta(minutes=2))  # no worker until now
        assert [ran.outcome for ran in run_due()] == ["cancelled"]
    assert result.state == "REVOKED"
    assert result.ready()
    assert not result.successful()
    assert "late" not in celery_style.calls  # its function never ran
    with pytest.raises(TaskRevokedError, match=r"was not run: it expired at .* UTC"):
        result.get(timeout=1)
    revoked = add.apply_async(args=[1, 1], countdown=60, expires=600)
    revoked.revoke()
    with pytest.raises(TaskRevokedError, match="was cancelled before it ran"):
        revoked.get(timeout=1)


def test_the_decorator_s_expires_is_every_call_s_default() -> None:
    @shared_task(bind=True, expires=datetime.timedelta(minutes=10), name="celery.exp")
    def expiring(self: Any) -> str:
        return self.request.expires.isoformat()

    assert expiring.expires == datetime.timedelta(minutes=10)
    before = timezone.now()
    result = expiring.delay()
    row = DelayedTask.objects.get(pk=result.id)
    span = datetime.timedelta(minutes=10)
    assert before + span <= row.expires_at <= timezone.now() + span
    # self.request.expires: when the attempt's task expires.
    run_due()
    assert result.get() == row.expires_at.isoformat()
    # apply_async(expires=...) replaces it; expires=None means none.
    moment = later(7200)
    assert (
        DelayedTask.objects.get(
            pk=expiring.apply_async(countdown=3600, expires=moment).id
        ).expires_at
        == moment
    )
    none = expiring.apply_async(countdown=3600, expires=None)
    assert DelayedTask.objects.get(pk=none.id).expires_at is None
    # A countdown past the default expiry: refused, naming the default.
    with pytest.raises(InvalidSchedule) as refused:
        expiring.apply_async(countdown=3600)
    assert str(refused.value).endswith(
        "(expires=datetime.timedelta(seconds=600) is the default of @shared_task "
        "on celery.exp; pass apply_async(expires=...) to give this call another, "
        "or expires=None for none)"
    )


def test_a_retry_that_would_fall_after_the_expiry_fails_the_task() -> None:
    # send_reminder retries after default_retry_delay, 30 s: past a 20 s expiry.
    result = send_reminder.apply_async(args=["exp"], kwargs={"failures": 1}, expires=20)
    assert [r.outcome for r in run_due(until=later(3600))] == ["failed"]
    assert result.state == "FAILURE"
    # The retry asked for is the attempt's outcome, as the row keeps it.
    with pytest.raises(
        Retry,
        match=r"^Retry in 30s: ConnectionError: attempt 1 failed \(not retried: "
        r"the next attempt would be due after the task expires, at .* UTC\)$",
    ):
        result.get()


def test_a_rolled_back_delay_never_runs() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        add.delay(1, 1)
        raise RuntimeError("the view failed")
    assert not DelayedTask.objects.exists()


def test_a_direct_call_runs_the_function_here() -> None:
    assert add(2, 2) == 4
    assert send_reminder("direct") == {"id": None, "retries": 0}
    assert not DelayedTask.objects.exists()


def test_arguments_that_do_not_fit_are_refused_when_scheduled() -> None:
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
        add.delay(1)
    # bind=True: the task is the function's first parameter, not the caller's.
    with pytest.raises(TypeError, match="takes 2 positional arguments but 3"):
        send_reminder.delay("k", 0, "extra")
    assert not DelayedTask.objects.exists()


def test_revoke_cancels_a_task_that_has_not_started() -> None:
    result = add.apply_async(args=[1, 1], countdown=60)
    assert result.revoke() is True
    assert result.state == "REVOKED"
    assert result.ready()
    assert result.revoke() is False
    assert run_due(until=later(61)) == []
    with pytest.raises(Exception, match="was cancelled") as raised:
        result.get(timeout=1)
    assert type(raised.value).__name__ == "TaskRevokedError"


# -- retries, counted as Celery counts them ---------------------------------


def test_self_retry_counts_retries_and_keeps_the_request() -> None:
    result = send_reminder.delay("r", failures=2)
    ran = run_due(until=later(3600))
    assert [r.outcome for r in ran] == ["retrying", "retrying", "succeeded"]
    # default_retry_delay=30: each retry is due 30 s after the failure.
    gaps = [
        (b.started_at - a.started_at).total_seconds()
        for a, b in itertools.pairwise(ran)
    ]
    assert all(29.9 < gap < 31 for gap in gaps), gaps
    assert result.get() == {"id": result.id, "retries": 2}
    row = DelayedTask.objects.get(pk=result.id)
    assert (row.attempts, row.max_attempts) == (3, 3)  # max_retries=2: 3 attempts


def test_self_retry_past_max_retries_raises_the_exception() -> None:
    result = send_reminder.delay("x", failures=5)
    ran = run_due(until=later(3600))
    # max_retries=2: the first attempt and two retries, then the error.
    assert [r.outcome for r in ran] == ["retrying", "retrying", "failed"]
    assert result.state == "FAILURE"
    assert result.failed()
    with pytest.raises(ConnectionError, match="attempt 3 failed"):
        result.get()
    assert isinstance(result.get(propagate=False), ConnectionError)
    assert celery_style.calls["x"] == 3


def test_an_exception_not_in_autoretry_for_fails_at_once() -> None:
    result = breaks.delay("b")
    assert [r.outcome for r in run_due(until=later(3600))] == ["failed"]
    assert celery_style.calls["b"] == 1  # max_retries=5 counts self.retry() only
    with pytest.raises(ValueError, match="bad input"):
        result.get()


def test_autoretry_for_with_backoff_as_celery_computes_it() -> None:
    result = call_gateway.delay("g", failures=3)
    ran = run_due(until=later(3600))
    assert [r.outcome for r in ran] == ["retrying"] * 3 + ["succeeded"]
    # retry_backoff=True, no jitter: 1, 2 and 4 s after each failure.
    gaps = [
        round((b.started_at - a.started_at).total_seconds())
        for a, b in itertools.pairwise(ran)
    ]
    assert gaps == [1, 2, 4]
    assert result.get() == 4


def test_autoretry_stops_at_retry_kwargs_max_retries() -> None:
    result = call_gateway.delay("g2", failures=10)
    ran = run_due(until=later(3600))
    assert [r.outcome for r in ran] == ["retrying"] * 3 + ["failed"]
    with pytest.raises(TimeoutError, match="attempt 4 timed out"):
        result.get()


def test_retry_with_a_larger_max_retries_than_the_task() -> None:
    result = retries_beyond.delay("beyond")
    ran = run_due(until=later(3600))
    assert [r.outcome for r in ran] == ["retrying"] * 5 + ["succeeded"]
    assert result.get() == 6
    row = DelayedTask.objects.get(pk=result.id)
    assert row.attempts == 6
    assert row.max_attempts >= 6


def test_retry_without_exc_past_the_limit_raises_max_retries_exceeded() -> None:
    @shared_task(bind=True, max_retries=0, name="celery_style.no_retries")
    def no_retries(self: Any) -> None:
        raise self.retry()

    result = no_retries.delay()
    run_due()
    with pytest.raises(MaxRetriesExceededError, match="Can't retry"):
        result.get()


def test_a_task_that_is_retrying_says_retry() -> None:
    result = send_reminder.delay("s", failures=1)
    run_due()
    assert result.state == "RETRY"
    assert not result.ready()
    # As Celery's: the result of a task waiting to retry is the error.
    assert isinstance(result.result, Retry)
    assert "ConnectionError: attempt 1 failed" in str(result.result)


def test_retry_with_a_naive_eta_takes_it_in_the_current_time_zone() -> None:
    result = naive_eta.delay()
    [first] = run_due()
    assert first.outcome == "retrying"
    row = DelayedTask.objects.get(pk=result.id)
    expected = first.started_at + datetime.timedelta(minutes=10)
    assert abs((row.run_at - expected).total_seconds()) < 1


def test_retry_throw_false_is_refused_and_fails_the_task() -> None:
    retry_without_throw.delay()
    [ran] = run_due()
    assert ran.outcome == "failed"
    assert "throw=False) is not supported" in ran.error


def test_methods_celery_has_and_this_kit_does_not_fail_the_task_at_once() -> None:
    # autoretry_for=(Exception,) does not retry what the code cannot do.
    result = updates_state.delay()
    [ran] = run_due()
    assert ran.outcome == "failed"
    assert "update_state() is not supported" in ran.error
    assert result.failed()


def test_a_negative_countdown_runs_now_as_celery_does() -> None:
    result = add.apply_async(args=[1, 2], countdown=-5)
    [ran] = run_due()
    assert ran.task.pk == uuid.UUID(result.id)


def test_the_task_s_async_result() -> None:
    result = add.delay(1, 2)
    assert add.AsyncResult(result.id) == result
    run_due()
    assert add.AsyncResult(result.id).get() == 3


def test_an_int_rate_limit_is_celery_s_tasks_per_second() -> None:
    def work() -> None: ...

    limited = shared_task(name="celery_style.rated", rate_limit=10)(work)
    assert limited.rate_limit == "10/s"


# -- results ---------------------------------------------------------------------


def test_ignore_result_stores_none_and_get_says_why() -> None:
    result = fire_and_forget.delay("ignored")
    run_due()
    assert result.successful()
    assert result.result is None
    assert Ledger.objects.filter(key="ignored").exists()
    with pytest.raises(InvalidTaskState, match="ignore_result=True"):
        result.get()


def test_ignore_result_still_raises_the_error_of_a_failed_task() -> None:
    result = fire_and_forget.delay(None)  # the ledger's key cannot be NULL
    run_due()
    assert result.failed()
    with pytest.raises(TaskFailed, match="IntegrityError"):
        result.get()


def test_get_times_out_with_celery_s_error() -> None:
    with test_mode(None):  # production: a worker could run it, none does
        result = add.apply_async(args=[1, 2], countdown=600)
        with pytest.raises(TimeoutError, match=r"did not finish within 0\.2 s"):
            result.get(timeout=0.2)


def test_get_in_manual_test_mode_says_what_runs_the_task() -> None:
    result = add.delay(1, 2)
    with pytest.raises(InvalidTaskState, match="until the test calls"):
        result.get(timeout=30)
    run_due()
    assert result.get() == 3


def test_get_inside_the_scheduling_transaction_refuses_to_wait_for_ever() -> None:
    with test_mode(None), transaction.atomic():
        result = add.delay(1, 2)
        with pytest.raises(InvalidTaskState, match="inside a database transaction"):
            result.get(timeout=5)


def test_an_unknown_id_is_pending() -> None:
    assert AsyncResult("0190a8c4-0000-7000-8000-000000000000").state == "PENDING"
    assert AsyncResult("not-a-uuid").state == "PENDING"


# -- what is refused, by name -------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"serializer": "pickle"}, "serializer= is not supported"),
        ({"base": object}, "base= is not supported"),
        (
            {"expires": later(60)},
            "expires must be a number of seconds or a timedelta, counted from "
            "each call",
        ),
        ({"expires": 0}, "expires must be more than 0 seconds"),
        ({"expires": "1h"}, "expires must be a number of seconds"),
        ({"acks_late": False}, "acks_late=False is not supported"),
        ({"max_retry": 3}, "unknown option max_retry="),
        ({"max_retries": -1}, "max_retries must be None or an integer"),
        ({"autoretry_for": (int,)}, "autoretry_for must be a tuple of exception"),
        ({"retry_kwargs": {"interval": 2}}, "retry_kwargs takes max_retries"),
        (
            {"rate_limit": "ten"},
            '@shared_task\\(rate_limit=...\\) must be a string "N/s"',
        ),
        ({"time_limit": "1m"}, "time_limit must be a number of seconds"),
    ],
)
def test_refused_task_options_name_the_option(
    options: dict[str, Any], message: str
) -> None:
    def work() -> None: ...

    with pytest.raises(InvalidTaskDefinition, match=message):
        shared_task(name="celery_style.refused", **options)(work)


def test_bind_needs_a_first_parameter() -> None:
    def work() -> None: ...

    with pytest.raises(InvalidTaskDefinition, match="must take the task as its first"):
        shared_task(bind=True, name="celery_style.unbound")(work)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"link": "x"}, "link= is not supported: callbacks"),
        ({"task_id": "abc"}, "pass key=... \\(a dedupe key\\)"),
        ({"routing_key": "x"}, "pass queue=... instead"),
        ({"countdwon": 5}, "unknown option countdwon="),
    ],
)
def test_refused_call_options_name_the_option(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        add.apply_async(args=[1, 2], **options)
    assert not DelayedTask.objects.exists()


def test_the_canvas_is_refused_with_what_to_do_instead() -> None:
    with pytest.raises(NotSupported, match="s\\(\\) is not supported"):
        add.s(1, 2)
    with pytest.raises(NotSupported, match="chain\\(\\) is not supported"):
        chain(add, add)
    with pytest.raises(NotSupported, match="schedule_many"):
        group()
    with pytest.raises(NotSupported, match="terminate"):
        add.delay(1, 2).revoke(terminate=True)


def test_retry_outside_a_worker_raises_the_exception_as_celery_does() -> None:
    with pytest.raises(ConnectionError):
        send_reminder("direct-fail", failures=1)
    with pytest.raises(Retry):
        retries_beyond("direct-retry")
    assert MaxRetriesExceededError.__mro__[1].__name__ == "DelayQueueException"


def test_celery_s_eager_setting_is_reported_as_doing_nothing_here() -> None:
    assert not [m for m in run_checks() if m.id == "delayq.W008"]
    with override_settings(CELERY_TASK_ALWAYS_EAGER=True):
        [warning] = [m for m in run_checks() if m.id == "delayq.W008"]
    assert "CELERY_TASK_ALWAYS_EAGER is set" in warning.msg
    assert "TEST_MODE" in (warning.hint or "")
