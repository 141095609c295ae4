"""Django's Tasks framework on DelayQueueBackend: enqueue writes our row,
our dispatcher and worker run it, and results are read back from the row."""

from __future__ import annotations

import datetime
import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import transaction
from django.utils import timezone

from django_delayq import cancel, registry, schedule
from django_delayq.backends import AttemptAborted, DelayQueueBackend, TaskCancelled
from django_delayq.contrib.tasks.bridge import FrameworkTask
from django_delayq.contrib.tasks.compat import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_delayq.exceptions import (
    InvalidPayload,
    ResultTooLarge,
    TaskNotRegistered,
    UnknownQueue,
)
from django_delayq.models import DelayedTask, Status
from django_delayq.store.keys import shard_keys
from django_delayq.timing import ceil_ms
from tests.support.helpers import drain, due_members, expected_score, indexed_score
from tests.testapp import tasks as delayq_tasks
from tests.testapp.django_tasks import (
    Boom,
    add,
    async_create_order,
    create_order,
    create_order_non_atomic,
    declared_elsewhere,
    fails,
    flaky,
    returns_a_set,
    returns_int_keys,
    returns_nan,
    returns_text,
)
from tests.testapp.models import Ledger, Order

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
READY = shard_keys("delayq", "default", 0).ready
#: A worker thread's name: host:pid:random id-thread number.
WORKER_THREAD = re.compile(
    rf"{re.escape(socket.gethostname())}:{os.getpid()}:[0-9a-f]{{6}}-\d+"
)


@pytest.fixture
def fast_retries(settings):
    settings.DELAYQ = {**settings.DELAYQ, "RETRY_BACKOFF": 0.0}


@pytest.fixture
def received():
    """What the framework's signals delivered: (signal, status, result id)."""
    seen: list[tuple[str, str, str]] = []
    receivers = {}
    for name, signal in [
        ("enqueued", task_enqueued),
        ("started", task_started),
        ("finished", task_finished),
    ]:

        def receiver(sender, task_result, _name=name, **kwargs):
            # Receivers' errors are logged, not raised: record a wrong sender.
            label = _name if sender is DelayQueueBackend else f"{_name} from {sender}"
            seen.append((label, str(task_result.status), task_result.id))

        receivers[signal] = receiver
        signal.connect(receiver)
    yield seen
    for signal, receiver in receivers.items():
        signal.disconnect(receiver)


def test_the_backend_declares_what_it_supports():
    backend = task_backends["default"]
    assert isinstance(backend, DelayQueueBackend)
    assert backend.supports_defer
    assert backend.supports_get_result
    assert backend.supports_async_task
    assert backend.supports_priority


def test_a_priority_is_kept_by_the_row_and_the_result(redis_client):
    result = add.using(priority=10).enqueue(2, 3)
    assert result.task.priority == 10
    assert DelayedTask.objects.get(pk=result.id).priority == 10
    assert add.get_result(result.id).task.priority == 10
    assert add.enqueue(1, 1).task.priority == 0
    with pytest.raises(InvalidTask, match="priority"):
        add.using(priority=101)  # the framework's own range


def test_enqueue_writes_a_scheduled_row_named_by_module_path(redis_client):
    result = add.enqueue(2, 3)
    row = DelayedTask.objects.get(pk=result.id)
    assert (row.name, row.queue, row.status) == (
        add.module_path,
        "default",
        "scheduled",
    )
    assert (row.args, row.kwargs, row.attempts) == ([2, 3], {}, 0)
    assert row.max_attempts == 3  # DELAYQ["MAX_ATTEMPTS"]
    assert indexed_score(redis_client, row) is not None
    assert result.status == TaskResultStatus.READY
    assert result.task == add
    assert (result.backend, result.args, result.kwargs) == ("default", [2, 3], {})
    assert result.enqueued_at == row.created_at
    assert (result.started_at, result.finished_at, result.worker_ids) == (
        None,
        None,
        [],
    )
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value


def test_arguments_django_accepts_are_stored_as_its_backends_store_them(
    redis_client,
):
    """Bytes (UTF-8) and integer dict keys, which Django's backends accept:
    the task gets them as a JSON round trip gives them."""
    result = add.enqueue(b"caf\xc3\xa9", b={1: (2, 3)})
    row = DelayedTask.objects.get(pk=result.id)
    assert (row.args, row.kwargs) == (["caf\u00e9"], {"b": {"1": [2, 3]}})
    # The result says what the task will get, as get_result() will later.
    assert (result.args, result.kwargs) == (row.args, row.kwargs)
    assert add.get_result(result.id).kwargs == {"b": {"1": [2, 3]}}


def test_a_due_task_runs_and_its_result_is_read_back_from_the_row(redis_client):
    result = add.enqueue(2, b=40)
    drain()
    done = add.get_result(result.id)
    row = DelayedTask.objects.get(pk=result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 42
    assert done.is_finished
    assert (done.attempts, done.errors) == (1, [])
    [worker] = done.worker_ids
    assert WORKER_THREAD.fullmatch(worker), worker
    assert done.started_at == done.last_attempted_at == row.started_at
    assert done.finished_at == row.finished_at
    assert done.enqueued_at <= done.started_at <= done.finished_at
    # The result enqueue() returned refreshes from the row as well.
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert async_to_sync(add.aget_result)(result.id).return_value == 42


def test_run_after_defers_the_task_to_that_moment(redis_client):
    run_after = timezone.now().replace(microsecond=123_456) + datetime.timedelta(
        hours=1
    )
    result = add.using(run_after=run_after).enqueue(1, 1)
    row = DelayedTask.objects.get(pk=result.id)
    assert row.run_at == run_after  # to the microsecond
    # Never dispatched early: the score is rounded up to the millisecond.
    assert indexed_score(redis_client, row) == expected_score(row)
    assert expected_score(row) == int(ceil_ms(run_after).timestamp() * 1000)
    drain()
    later = task_backends["default"].get_result(result.id)
    assert later.status == TaskResultStatus.READY
    assert later.task.run_after == result.task.run_after == run_after
    assert later.task == result.task
    assert DelayedTask.objects.get(pk=result.id).attempts == 0


@pytest.mark.parametrize(
    "run_after",
    [
        datetime.datetime(2001, 2, 3, 4, 5, 6, 789_012, tzinfo=datetime.UTC),
        None,
    ],
)
def test_a_result_read_back_has_the_run_after_enqueue_returned(redis_client, run_after):
    """A past run_after too (due at once): not None, and not rounded."""
    result = add.using(run_after=run_after).enqueue(1, 1)
    later = task_backends["default"].get_result(result.id)
    assert later.task.run_after == result.task.run_after == run_after
    assert later.task == result.task
    drain()
    done = task_backends["default"].get_result(result.id)
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, 2)
    assert done.task.run_after == run_after


def test_run_after_must_be_aware():
    with pytest.raises(InvalidTask, match="aware"):
        add.using(run_after=datetime.datetime(2030, 1, 1, 12, 0))


def test_a_task_enqueued_in_a_rolled_back_transaction_never_runs(
    redis_client, received
):
    with pytest.raises(RuntimeError), transaction.atomic():
        result = add.enqueue(1, 2)
        assert DelayedTask.objects.filter(pk=result.id).exists()
        raise RuntimeError("roll back")
    assert not DelayedTask.objects.exists()
    drain()
    assert received == []  # not even task_enqueued
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result(result.id)


def test_task_enqueued_is_sent_after_the_commit(redis_client, received):
    with transaction.atomic():
        result = add.enqueue(1, 2)
        assert received == []
    assert received == [("enqueued", "READY", result.id)]


def test_task_started_and_finished_are_sent_by_the_worker(
    redis_client, received, fast_retries
):
    ok = add.enqueue(1, 2)
    drain()
    assert received == [
        ("enqueued", "READY", ok.id),
        ("started", "RUNNING", ok.id),
        ("finished", "SUCCESSFUL", ok.id),
    ]
    received.clear()
    bad = fails.enqueue("always")
    drain()
    # One start per attempt; finished once, when no attempt is left.
    assert received == [
        ("enqueued", "READY", bad.id),
        *[("started", "RUNNING", bad.id)] * 3,
        ("finished", "FAILED", bad.id),
    ]


def test_a_takes_context_task_gets_the_attempt_and_its_result(
    redis_client, fast_retries
):
    result = flaky.enqueue("ctx")
    drain()
    done = flaky.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == {
        "attempt": 2,
        "id": result.id,
        "status": "RUNNING",
        "backend": "default",
        "args": ["ctx"],
    }
    assert done.attempts == 2
    # One worker thread per attempt: drain() starts a new worker each round.
    assert len(done.worker_ids) == 2
    assert all(WORKER_THREAD.fullmatch(worker) for worker in done.worker_ids)
    assert done.worker_ids[0] != done.worker_ids[1]
    # The failed first attempt's write rolled back with it (atomic).
    assert list(Ledger.objects.values_list("key", flat=True)) == ["ctx:2"]


def test_a_retried_task_is_ready_again_with_the_error(redis_client):
    result = fails.enqueue("once")  # the default backoff keeps the retry away
    drain()
    retried = fails.get_result(result.id)
    assert retried.status == TaskResultStatus.READY
    assert retried.attempts == 1
    [error] = retried.errors
    assert error.exception_class is Boom


def test_a_failed_task_has_its_exception_class_and_traceback(
    redis_client, fast_retries
):
    result = fails.enqueue("nope")
    drain()
    failed = fails.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.attempts == 3
    [error] = failed.errors
    assert error.exception_class_path == "tests.testapp.django_tasks.Boom"
    assert error.exception_class is Boom
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert "tests.testapp.django_tasks.Boom: nope" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        _ = failed.return_value


def test_a_return_value_is_kept_as_a_json_round_trip_gives_it(redis_client):
    result = returns_int_keys.enqueue()
    drain()
    done = returns_int_keys.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == {"1": [2, 3], "b": "bytes"}


def test_a_return_value_no_json_store_holds_fails_the_attempt(
    redis_client, fast_retries
):
    """NaN: not "succeeded" with the value lost, but an error that says why."""
    result = returns_nan.enqueue()
    drain()
    failed = returns_nan.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class is InvalidPayload
    assert "the return value['ratio'] is nan" in failed.errors[0].traceback


def test_a_return_value_over_max_result_bytes_fails_the_task(
    redis_client, fast_retries, settings
):
    settings.DELAYQ = {**settings.DELAYQ, "MAX_RESULT_BYTES": 1000}
    fits, too_large = returns_text.enqueue(998), returns_text.enqueue(999)
    drain()
    assert returns_text.get_result(fits.id).return_value == "r" * 998
    failed = returns_text.get_result(too_large.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class is ResultTooLarge
    assert 'over the DELAYQ["MAX_RESULT_BYTES"] limit of 1000' in (
        failed.errors[0].traceback
    )


def test_a_return_value_that_is_not_json_fails_the_task(redis_client, fast_retries):
    result = returns_a_set.enqueue()
    drain()
    failed = returns_a_set.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class is TypeError


def test_cancel_shows_as_failed_with_task_cancelled(redis_client, received):
    run_after = timezone.now() + datetime.timedelta(hours=1)
    result = add.using(run_after=run_after).enqueue(1, 2)
    assert cancel(result.id)
    cancelled = add.get_result(result.id)
    assert cancelled.status == TaskResultStatus.FAILED
    assert cancelled.finished_at is not None
    assert cancelled.started_at is None
    [error] = cancelled.errors
    assert error.exception_class is TaskCancelled
    assert "cancelled before it ran" in error.traceback
    drain()
    assert DelayedTask.objects.get(pk=result.id).status == Status.CANCELLED
    assert [name for name, _, _ in received] == ["enqueued"]


def test_a_lost_attempt_is_reported_as_attempt_aborted(redis_client):
    result = add.enqueue(1, 2)
    DelayedTask.objects.filter(pk=result.id).update(
        status=Status.FAILED,
        attempts=3,
        last_error="worker lost during attempt 3 of 3",
        finished_at=timezone.now(),
    )
    [error] = add.get_result(result.id).errors
    assert error.exception_class is AttemptAborted
    assert "worker lost during attempt 3 of 3" in error.traceback


def test_atomic_tasks_roll_back_the_writes_of_a_failed_attempt(
    redis_client, fast_retries
):
    result = create_order.enqueue("fail")
    drain()
    assert create_order.get_result(result.id).status == TaskResultStatus.FAILED
    assert not Order.objects.exists()
    # OPTIONS {"atomic": False, "max_attempts": 1} on the "non_atomic" alias.
    result = create_order_non_atomic.enqueue("fail")
    assert DelayedTask.objects.get(pk=result.id).max_attempts == 1
    drain()
    failed = create_order_non_atomic.get_result(result.id)
    assert (failed.status, failed.attempts) == (TaskResultStatus.FAILED, 1)
    assert failed.backend == "non_atomic"
    assert list(Order.objects.values_list("status", flat=True)) == ["fail"]


def test_async_tasks_run_in_the_workers_transaction(redis_client, fast_retries):
    paid = async_create_order.enqueue("paid")
    failing = async_to_sync(async_create_order.aenqueue)("fail")
    drain()
    done = async_create_order.get_result(paid.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert Order.objects.get(pk=done.return_value).status == "paid"
    failed = async_create_order.get_result(failing.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class is Boom
    assert not Order.objects.filter(status="fail").exists()


def test_get_result_of_an_unknown_id_raises_does_not_exist(redis_client):
    native = schedule(delayq_tasks.add, args=[1, 2])
    for result_id in [str(uuid.uuid4()), "not-a-uuid", str(native.pk)]:
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["default"].get_result(result_id)


def test_bad_arguments_are_refused_and_write_nothing(redis_client, settings):
    with pytest.raises(InvalidPayload, match=r"args\[0\] is a date"):
        add.enqueue(datetime.date(2030, 1, 1), 2)
    # A TypeError too, as Django's own backends raise for such arguments,
    # with the words of theirs, then the place and the fix.
    with pytest.raises(TypeError) as caught:
        add.enqueue(1, b={1, 2})
    assert str(caught.value) == (
        "kwargs['b'] is a set, which is not JSON serializable; pass a sorted "
        "list. (Unsupported type: <class 'set'>)"
    )
    with pytest.raises(TypeError) as caught:
        add.enqueue(datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC), 2)
    assert str(caught.value).startswith(
        "args[0] is a datetime, which is not JSON serializable; pass value.isoformat()"
    )
    assert str(caught.value).endswith("(Unsupported type: <class 'datetime.datetime'>)")
    settings.TASKS = {
        "default": {"BACKEND": "django_delayq.backends.DelayQueueBackend", "QUEUES": []}
    }
    with pytest.raises(UnknownQueue, match="'emails'"):
        add.using(queue_name="emails").enqueue(1, 2)
    assert not DelayedTask.objects.exists()


def test_arguments_that_do_not_fit_the_task_are_refused_at_enqueue(redis_client):
    with pytest.raises(TypeError) as caught:
        add.enqueue(1, 2, 3)
    assert str(caught.value) == (
        "tests.testapp.django_tasks.add: refused at schedule time, nothing was "
        "written: add() takes 2 positional arguments but 3 were given; it is "
        "add(a, b). Pass args= and kwargs= that fit it."
    )
    # A takes_context task's context is the worker's to pass, not the caller's.
    with pytest.raises(
        TypeError, match=r"flaky\(\) missing .* 'key'; it is flaky\(key\)"
    ):
        flaky.enqueue()
    with pytest.raises(TypeError, match="unexpected keyword argument 'context'"):
        flaky.enqueue("k", context=None)
    assert not DelayedTask.objects.exists()
    assert due_members(redis_client) == {}
    assert flaky.enqueue("k").args == ["k"]


def test_a_task_runs_only_on_the_backend_it_is_declared_for(redis_client):
    with pytest.raises(InvalidTask, match="declared, on backend 'default'"):
        add.using(backend="non_atomic").enqueue(1, 2)
    assert not DelayedTask.objects.exists()


def test_the_registry_finds_backend_tasks_by_module_path_without_keeping_them():
    found = registry.get(add.module_path)
    assert isinstance(found, FrameworkTask)
    assert (found.name, found.atomic, found.queue) == (add.module_path, True, "default")
    assert found.django_task == add
    assert found(2, 3) == 5
    assert add.module_path not in registry.all_tasks()
    assert registry.get(create_order_non_atomic.module_path).atomic is False
    # Called directly, a takes_context task gets the context of a first attempt.
    with pytest.raises(Boom, match="first attempt"):
        registry.get(flaky.module_path)("direct")
    assert Ledger.objects.get().key == "direct:1"


@pytest.mark.parametrize(
    "name",
    [
        declared_elsewhere.module_path,  # a task of another backend
        "tests.testapp.django_tasks.not_a_task",  # a plain function
        "tests.testapp.django_tasks.Boom",  # not a function at all
        "tests.testapp.django_tasks.missing",
        "this.s",  # not in an installed app: never even imported
        # an installed app's module that no one imported: not imported now
        "tests.testapp.never_imported.looks_like_a_task",
    ],
)
def test_a_forged_name_runs_nothing(redis_client, fast_retries, name):
    with pytest.raises(TaskNotRegistered):
        schedule(name)
    row = DelayedTask.objects.create(name=name, run_at=timezone.now())
    redis_client.xadd(READY, {"id": row.pk.bytes})
    drain()
    row.refresh_from_db()
    assert row.status == Status.FAILED
    assert "is not registered in this worker" in row.last_error
    assert not Order.objects.exists()
    assert "this" not in sys.modules
    assert "tests.testapp.never_imported" not in sys.modules
    assert "DELAYQ_TEST_NEVER_IMPORTED_RAN" not in os.environ
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(str(row.pk))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["atomic"], "must be a dict, not list"),
        ({"atomc": False}, "unknown option 'atomc'.*Did you mean 'atomic'"),
        ({"max_attempts": 0}, r'\["max_attempts"\] must be an integer from 1'),
        ({"atomic": "yes"}, r'\["atomic"\] must be True or False'),
    ],
)
def test_bad_options_are_reported_by_id_and_refused_at_enqueue(
    settings, options, message
):
    settings.TASKS = {
        "default": {
            "BACKEND": "django_delayq.backends.DelayQueueBackend",
            "OPTIONS": options,
        }
    }
    [error] = task_backends["default"].check()
    assert error.id == "delayq.E009"
    assert error.msg.startswith('TASKS["default"]["OPTIONS"]')
    with pytest.raises(InvalidTaskBackend, match=rf"{message}.*\(delayq\.E009\)"):
        add.enqueue(1, 2)
    assert not DelayedTask.objects.exists()


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        (["default", "emails"], "names 'emails', which is not a django-delayq queue"),
        ("orders", "must be a list of queue names"),
    ],
)
def test_queues_must_be_django_delayq_queues(settings, queues, message):
    settings.TASKS = {
        "default": {
            "BACKEND": "django_delayq.backends.DelayQueueBackend",
            "QUEUES": queues,
        }
    }
    [error] = task_backends["default"].check()
    assert error.id == "delayq.E010"
    assert message in error.msg
    assert "DELAYQ" in error.hint


def test_the_configured_backends_pass_their_checks():
    assert task_backends["default"].check() == []
    assert task_backends["non_atomic"].check() == []


def test_manage_py_check_runs_the_backend_checks(settings):
    settings.TASKS = {
        "default": {
            "BACKEND": "django_delayq.backends.DelayQueueBackend",
            "QUEUES": ["emails"],
        }
    }
    with pytest.raises(SystemCheckError, match=r"delayq\.E010"):
        call_command("check")


def test_without_the_framework_the_package_works_and_e011_says_why():
    # A process where neither django.tasks nor django_tasks can be imported,
    # as on Django 5.2 without the backport.
    script = """
import sys
sys.modules["django.tasks"] = sys.modules["django_tasks"] = None
import django
django.setup()
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django_delayq import schedule
from django_delayq.registry import get
print([m.id for m in run_checks(tags=["django_delayq"])])
try:
    import django_delayq.backends
except ImproperlyConfigured as exc:
    print("ImproperlyConfigured:", exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ids, error = done.stdout.splitlines()
    # One E011 per TASKS alias on DelayQueueBackend.
    assert ids == "['delayq.E011', 'delayq.E011']"
    assert error.startswith("ImproperlyConfigured: ")
    assert "django-delayq[tasks]" in error


def test_an_enqueued_task_shows_in_the_admin_and_cancels_there(
    admin_client, redis_client
):
    from django.urls import reverse

    later = timezone.now() + datetime.timedelta(minutes=10)
    result = add.using(run_after=later).enqueue(2, 3)
    changelist = reverse("admin:django_delayq_delayedtask_changelist")
    page = admin_client.get(changelist).content.decode()
    assert add.module_path in page
    assert "in 10 min" in page or "in 9 min" in page

    data = {"action": "cancel_tasks", "_selected_action": [result.id], "post": "yes"}
    assert admin_client.post(changelist, data).status_code == 302

    cancelled = add.get_result(result.id)
    assert cancelled.status == TaskResultStatus.FAILED
    assert cancelled.errors[-1].exception_class is TaskCancelled
    row = DelayedTask.objects.get(pk=result.id)
    assert indexed_score(redis_client, row) is None
