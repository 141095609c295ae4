"""The users' testing toolkit (django_delayq.testing), on the real database
and with no Redis server: the suite's settings point REDIS_URL at a closed
port, and no test here starts one."""

from __future__ import annotations

import datetime
import socket
import time
from typing import Any

import pytest
import time_machine
from django.core.checks import run_checks
from django.db import transaction
from django.test import TestCase, TransactionTestCase, override_settings
from django.utils import timezone

from django_delayq import cancel, reschedule, schedule, signals, task
from django_delayq.conf import get_settings, parse
from django_delayq.exceptions import DuplicateTask, InvalidConfiguration, TooManyRuns
from django_delayq.models import DelayedTask, OutboxEntry, Status
from django_delayq.testing import (
    assert_not_scheduled,
    assert_scheduled,
    run_due,
    scheduled,
    test_mode,
)
from django_delayq.timing import moment_text
from tests.testapp.models import Ledger, Order
from tests.testapp.tasks import reads_meta

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(30)]


@task(queue="orders", max_attempts=5)
def order_cancel(order_id: int) -> None:
    Order.objects.filter(pk=order_id, status="unpaid").update(status="cancelled")


#: attempts each "flaky" key has made, across attempts (this process only)
_attempts: dict[str, int] = {}


@task(max_attempts=4)
def flaky(key: str, failures: int) -> int:
    _attempts[key] = _attempts.get(key, 0) + 1
    if _attempts[key] <= failures:
        raise ValueError(f"attempt {_attempts[key]} fails")
    return _attempts[key]


@task(max_attempts=2)
def hopeless() -> None:
    raise RuntimeError("never works")


@task
def note(key: str) -> str:
    """Record that it ran, and when by the clock it saw."""
    Ledger.objects.create(key=key, pid=0, at=timezone.now())
    return timezone.now().isoformat()


@task
def chain(key: str, delay: float) -> None:
    Ledger.objects.create(key=key, pid=0, at=timezone.now())
    schedule(note, args=[f"{key}:next"], delay=delay)


@task
def forever() -> None:
    schedule(forever, delay=1)


@task(time_limit=0.2, max_attempts=1)
def too_slow() -> None:
    while True:
        time.sleep(0.01)


def ledger() -> list[str]:
    return list(Ledger.objects.order_by("at", "id").values_list("key", flat=True))


def in_minutes(minutes: float) -> datetime.datetime:
    return timezone.now() + datetime.timedelta(minutes=minutes)


# -- the manual mode -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@test_mode("manual")
def test_manual_mode_writes_rows_as_in_production_and_leaves_redis_alone():
    with transaction.atomic():
        order = Order.objects.create()
        row = order_cancel.schedule(
            args=[order.pk], delay=900, key=f"order-cancel:{order.pk}", priority=5
        )
    # Committed, with Redis unreachable: production would have queued an
    # outbox entry after failing to reach it. Nothing tried.
    assert OutboxEntry.objects.count() == 0
    found = assert_scheduled(order_cancel, args=[order.pk])
    assert [r.pk for r in found] == [row.pk]
    assert (row.queue, row.priority, row.status) == ("orders", 5, Status.SCHEDULED)
    assert len(scheduled(order_cancel)) == 1
    assert_scheduled(key=f"order-cancel:{order.pk}", queue="orders", priority=5)
    assert_scheduled(eta=row.run_at)
    assert_scheduled(eta=(in_minutes(14), in_minutes(16)))
    assert_not_scheduled(eta=(None, in_minutes(14)))
    assert_not_scheduled(order_cancel, args=[order.pk + 1])


@test_mode("manual")
def test_a_rolled_back_schedule_leaves_nothing():
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        order_cancel.schedule(args=[1], delay=900)
        1 / 0  # noqa: B018
    with transaction.atomic():
        order_cancel.schedule(args=[2], delay=900)
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            order_cancel.schedule(args=[3], delay=900, key="inner")
            1 / 0  # noqa: B018
    assert [row.args for row in scheduled()] == [[2]]
    assert run_due(until=in_minutes(20))[0].task.args == [2]


@test_mode("manual")
def test_dedupe_keys_cancel_and_reschedule_behave_as_in_production():
    order_cancel.schedule(args=[1], delay=900, key="order-cancel:1")
    with pytest.raises(DuplicateTask, match="order-cancel:1"):
        order_cancel.schedule(args=[1], delay=60, key="order-cancel:1")
    replaced = order_cancel.schedule(
        args=[1], delay=60, key="order-cancel:1", replace=True
    )
    assert [row.pk for row in scheduled(key="order-cancel:1")] == [replaced.pk]

    moved = reschedule(key="order-cancel:1", delay=300)
    assert_scheduled(key="order-cancel:1", eta=moved.run_at)

    assert cancel(key="order-cancel:1") is True
    assert_not_scheduled(order_cancel)
    assert run_due(until=in_minutes(60)) == []
    assert OutboxEntry.objects.count() == 0


@test_mode("manual")
def test_a_failed_assertion_lists_what_was_scheduled():
    order_cancel.schedule(args=[7], delay=900, key="order-cancel:7")
    with pytest.raises(AssertionError) as failed:
        assert_scheduled(order_cancel, args=[8])
    message = str(failed.value)
    assert (
        f"Expected a scheduled task with task='{order_cancel.name}', args=[8]; "
        f"found 0." in message
    )
    assert f"{order_cancel.name}(args=[7], kwargs={{}}) " in message
    assert "key='order-cancel:7' queue='orders'" in message

    with pytest.raises(AssertionError, match=r"Expected no scheduled task") as found:
        assert_not_scheduled(order_cancel)
    assert "args=[7]" in str(found.value)
    with pytest.raises(AssertionError, match="Expected 2 scheduled task"):
        assert_scheduled(order_cancel, count=2)


@test_mode("manual")
def test_assertions_match_items_of_the_metadata_and_run_due_passes_it_on():
    row = reads_meta.schedule(args=["toolkit"], meta={"tenant": "acme"})
    # The items asked for, whatever else the metadata holds (the task's).
    assert_scheduled(reads_meta, meta={"tenant": "acme"})
    assert_scheduled(meta={"tenant": "acme", "team": "billing"}, count=1)
    assert_not_scheduled(meta={"tenant": "other"})
    assert_not_scheduled(meta={"request_id": None})  # not there: no match
    with pytest.raises(AssertionError) as failed:
        assert_scheduled(meta={"tenant": "other"})
    assert "meta={'tenant': 'other'}; found 0" in str(failed.value)
    assert "meta={'team': 'billing', 'tenant': 'acme'}" in str(failed.value)
    [ran] = run_due()
    assert ran.task.pk == row.pk
    assert ran.task.result == {
        "meta": {"team": "billing", "tenant": "acme"},
        "request_id": None,
    }


# -- run_due -------------------------------------------------------------------


@test_mode("manual")
def test_run_due_runs_only_what_is_due_by_then_as_of_its_due_time():
    soon = schedule(note, args=["soon"], delay=60)
    schedule(note, args=["later"], delay=3600)
    ran = run_due(until=in_minutes(16))
    assert [(r.name, r.outcome, r.attempt) for r in ran] == [
        (note.name, "succeeded", 1)
    ]
    # It ran as of its due time: what it read from the clock, and its row.
    assert datetime.datetime.fromisoformat(ran[0].result) >= soon.run_at
    assert ran[0].task.started_at >= soon.run_at
    assert ledger() == ["soon"]
    assert_scheduled(note, args=["later"])
    assert DelayedTask.objects.get(pk=soon.pk).status == Status.SUCCEEDED
    # The clock is back.
    assert timezone.now() < soon.run_at


@test_mode("manual")
def test_run_due_runs_in_due_order_and_higher_priorities_first():
    due = timezone.now() + datetime.timedelta(minutes=5)
    schedule(note, args=["low"], eta=due, priority=-10)
    schedule(note, args=["normal"], eta=due)
    schedule(note, args=["high"], eta=due, priority=10)
    schedule(note, args=["earlier"], eta=due - datetime.timedelta(seconds=1))
    schedule(note, args=["later"], eta=due + datetime.timedelta(seconds=1))
    ran = run_due(until=in_minutes(10))
    assert [r.task.args[0] for r in ran] == [
        "earlier",
        "high",
        "normal",
        "low",
        "later",
    ]


@test_mode("manual")
def test_run_due_retries_with_backoff_until_the_task_succeeds():
    key = f"flaky-{time.monotonic_ns()}"
    row = schedule(flaky, args=[key, 2])
    ran = run_due(until=in_minutes(5))
    assert [(r.attempt, r.outcome) for r in ran] == [
        (1, "retrying"),
        (2, "retrying"),
        (3, "succeeded"),
    ]
    assert ran[0].error == "ValueError: attempt 1 fails"
    assert ran[2].result == 3
    # RETRY_BACKOFF 2 s, doubled each time, times a jitter from 0.5 to 1.
    first, second = (
        (ran[i + 1].started_at - ran[i].started_at).total_seconds() for i in (0, 1)
    )
    assert 1.0 <= first <= 2.5
    assert 2.0 <= second <= 4.5
    row.refresh_from_db()
    assert (row.status, row.attempts, row.result) == (Status.SUCCEEDED, 3, 3)


@test_mode("manual")
def test_a_retry_not_due_by_until_stays_scheduled():
    schedule(flaky, args=[f"flaky-{time.monotonic_ns()}", 1])
    ran = run_due()
    assert [r.outcome for r in ran] == ["retrying"]
    assert_scheduled(flaky)


@test_mode("manual")
def test_a_task_that_fails_for_good_is_failed_with_its_error_and_signals():
    failed: list[str] = []

    def on_failed(sender: Any, task: DelayedTask, error: str, **kwargs: Any) -> None:
        failed.append(error)

    signals.task_failed.connect(on_failed)
    try:
        row = schedule(hopeless)
        ran = run_due(until=in_minutes(1))
    finally:
        signals.task_failed.disconnect(on_failed)
    assert [(r.attempt, r.outcome) for r in ran] == [(1, "retrying"), (2, "failed")]
    row.refresh_from_db()
    assert row.status == Status.FAILED
    assert row.last_error == "RuntimeError: never works"
    assert "raise RuntimeError" in row.last_traceback
    assert failed == ["RuntimeError: never works"]


@test_mode("manual")
def test_tasks_scheduled_by_tasks_run_when_due_and_a_loop_is_stopped():
    schedule(chain, args=["first", 90], delay=60)
    ran = run_due(until=in_minutes(2))
    assert [r.name for r in ran] == [chain.name]
    assert_scheduled(note, args=["first:next"])  # due at 2.5 minutes
    ran = run_due(until=in_minutes(3))
    assert [r.name for r in ran] == [note.name]
    assert ledger() == ["first", "first:next"]
    first, then = Ledger.objects.order_by("at")
    assert (then.at - first.at).total_seconds() >= 90

    schedule(forever)
    with pytest.raises(TooManyRuns, match="does a task schedule itself"):
        run_due(until=in_minutes(60), max_runs=5)


@test_mode("manual")
def test_a_task_past_its_time_limit_is_interrupted_and_fails():
    row = schedule(too_slow)
    ran = run_due()
    assert [r.outcome for r in ran] == ["failed"]
    assert "time limit of 0.2 s" in ran[0].error
    row.refresh_from_db()
    assert row.status == Status.FAILED


@test_mode("manual")
def test_run_due_works_under_a_travelled_or_frozen_clock():
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        row = schedule(note, args=["frozen"], delay=900)
        assert run_due() == []
        traveller.shift(datetime.timedelta(minutes=16))
        ran = run_due()
        assert [r.outcome for r in ran] == ["succeeded"]
        assert ran[0].started_at == timezone.now()
        # A frozen clock, moved forward: due by "until" in the future too.
        schedule(note, args=["next"], delay=60)
        assert [r.task.args for r in run_due(until=in_minutes(2))] == [["next"]]
    row.refresh_from_db()
    assert row.status == Status.SUCCEEDED


@test_mode("manual")
def test_run_due_cancels_a_task_that_expired_before_it_could_run():
    cancelled: list[DelayedTask] = []

    def on_cancelled(sender: Any, task: DelayedTask, **kwargs: Any) -> None:
        cancelled.append(task)

    with time_machine.travel(timezone.now(), tick=False) as traveller:
        # Run as of their due time, before their expiry: both run.
        schedule(note, args=["on time"], delay=60, expires=120)
        assert [r.outcome for r in run_due(until=in_minutes(5))] == ["succeeded"]
        late = schedule(note, args=["late"], delay=60, expires=120)
        kept = schedule(note, args=["kept"], delay=90, expires=600)
        # Nothing ran them until five minutes later.
        traveller.shift(datetime.timedelta(minutes=5))
        signals.task_cancelled.connect(on_cancelled)
        try:
            ran = run_due()
        finally:
            signals.task_cancelled.disconnect(on_cancelled)
    assert [(r.task.pk, r.outcome) for r in ran] == [
        (late.pk, "cancelled"),
        (kept.pk, "succeeded"),
    ]
    assert ran[0].error == (
        f"expired at {moment_text(late.expires_at)}, before it could start"
    )
    assert ledger() == ["on time", "kept"]  # its function was not called
    assert [task.pk for task in cancelled] == [late.pk]
    late.refresh_from_db()
    assert (late.status, late.started_at) == (Status.CANCELLED, None)


@test_mode("manual")
def test_run_due_fails_a_task_whose_retry_would_fall_after_its_expiry():
    with time_machine.travel(timezone.now(), tick=False):
        # The retry would wait RETRY_BACKOFF (2 s) times 0.5 to 1: 1 s at least.
        row = schedule(hopeless, expires=1)
        ran = run_due(until=in_minutes(1))
    assert [(r.attempt, r.outcome) for r in ran] == [(1, "failed")]
    assert ran[0].error.startswith(
        "RuntimeError: never works (not retried: the next attempt would be due "
        "after the task expires, at "
    )
    row.refresh_from_db()
    assert row.status == Status.FAILED
    # With time for its retries, the same task retries as usual.
    key = f"flaky-{time.monotonic_ns()}"
    schedule(flaky, args=[key, 1], expires=600)
    ran = run_due(until=in_minutes(5))
    assert [r.outcome for r in ran] == ["retrying", "succeeded"]


def test_run_due_refuses_a_bad_until():
    with pytest.raises(TypeError, match="takes a datetime"):
        run_due(until=900)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_runs"):
        run_due(max_runs=0)


# -- the immediate mode --------------------------------------------------------


@test_mode("immediate")
def test_immediate_mode_in_testcase_runs_at_the_end_of_the_outermost_block():
    with transaction.atomic():
        order = Order.objects.create()
        with transaction.atomic():
            order_cancel.schedule(args=[order.pk], delay=900)
        order.refresh_from_db()
        assert order.status == "unpaid"  # the inner block is no commit
        assert_scheduled(order_cancel)
    order.refresh_from_db()
    assert order.status == "cancelled"
    assert_not_scheduled(order_cancel)


@test_mode("immediate")
def test_immediate_mode_outside_any_block_runs_at_once_and_rollback_runs_nothing():
    order = Order.objects.create()
    order_cancel.schedule(args=[order.pk])
    order.refresh_from_db()
    assert order.status == "cancelled"

    keyed = Order.objects.create()
    order_cancel.schedule(args=[keyed.pk], key=f"order-cancel:{keyed.pk}")
    keyed.refresh_from_db()
    assert keyed.status == "cancelled"

    kept = Order.objects.create()
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        order_cancel.schedule(args=[kept.pk])
        1 / 0  # noqa: B018
    kept.refresh_from_db()
    assert kept.status == "unpaid"
    assert scheduled() == []


@test_mode("immediate")
def test_immediate_mode_runs_the_first_attempt_and_leaves_retries_to_run_due():
    key = f"flaky-{time.monotonic_ns()}"
    row = schedule(flaky, args=[key, 1])
    row.refresh_from_db()
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert [r.outcome for r in run_due(until=in_minutes(1))] == ["succeeded"]

    cancelled = Order.objects.create()
    with transaction.atomic():
        order_cancel.schedule(args=[cancelled.pk], key="gone")
        cancel(key="gone")
    cancelled.refresh_from_db()
    assert cancelled.status == "unpaid"


# -- test_mode and the setting -------------------------------------------------


def test_test_mode_sets_and_restores_the_setting_keeping_the_rest():
    before = get_settings()
    assert before.test_mode is None
    with test_mode("immediate"):
        assert get_settings().test_mode == "immediate"
        with test_mode("manual"):
            assert get_settings().test_mode == "manual"
        assert get_settings().queues == before.queues
    assert get_settings().test_mode is None
    with pytest.raises(
        ValueError, match='"manual", "immediate", the dotted path of an indexer'
    ):
        test_mode("eager")  # type: ignore[arg-type]


@test_mode("immediate")
class ImmediateModeInDjangosTestCase(TestCase):
    """The decorator on a TestCase class, and the immediate mode inside it."""

    def test_a_task_runs_at_once_outside_a_block_of_the_tests_own(self):
        assert get_settings().test_mode == "immediate"
        order = Order.objects.create()
        order_cancel.schedule(args=[order.pk], key=f"order-cancel:{order.pk}")
        order.refresh_from_db()
        assert order.status == "cancelled"
        assert_not_scheduled(order_cancel)


@test_mode("immediate")
class ImmediateModeInDjangosTransactionTestCase(TransactionTestCase):
    def test_a_task_runs_at_the_commit(self):
        with transaction.atomic():
            order = Order.objects.create()
            order_cancel.schedule(args=[order.pk], delay=900)
            order.refresh_from_db()
            assert order.status == "unpaid"
        order.refresh_from_db()
        assert order.status == "cancelled"
        assert OutboxEntry.objects.count() == 0  # Redis was not tried


def test_a_bad_test_mode_is_a_clear_error_and_a_check():
    raw = {"REDIS_URL": "redis://127.0.0.1:1/0", "TEST_MODE": "eager"}
    with pytest.raises(InvalidConfiguration, match=r"TEST_MODE.*delayq\.E016"):
        parse(raw)
    with override_settings(DELAYQ=raw):
        errors = [m for m in run_checks() if m.id == "delayq.E016"]
    assert len(errors) == 1
    assert "'eager'" in errors[0].msg


def test_in_a_test_mode_the_checks_connect_to_nothing():
    # A server that accepts connections and never answers: a check that
    # connected would wait for its timeout, and leave a connection here.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
        with override_settings(DELAYQ={"REDIS_URL": url, "TEST_MODE": "manual"}):
            assert run_checks(tags=["database"], databases=["default"]) == []
            # With DEBUG on, a test mode is a test settings module's; with
            # DEBUG off it is delayq.E017, and the production Redis is asked.
            with override_settings(DEBUG=True):
                deploy = run_checks(include_deployment_checks=True)
            assert "delayq.W007" not in {message.id for message in deploy}
        with pytest.raises(BlockingIOError):
            listener.accept()
