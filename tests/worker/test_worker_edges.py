"""Edge cases of the worker and the commands: odd task code, odd options."""

from __future__ import annotations

import signal
import threading

import pytest
from django.core.management import CommandError, call_command

from django_delayq import schedule
from django_delayq.dispatcher import Dispatcher
from django_delayq.exceptions import InvalidArgument
from django_delayq.models import DelayedTask, Status
from django_delayq.signals import task_succeeded
from django_delayq.store import connection
from django_delayq.store.keys import shard_keys
from django_delayq.worker import READ_BLOCK_MS, Worker
from tests.support.helpers import drain
from tests.testapp.models import Ledger
from tests.testapp.tasks import add, exits, fails_once, record
from tools.procs import free_port, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def row(task: DelayedTask) -> DelayedTask:
    return DelayedTask.objects.get(pk=task.pk)


def test_sys_exit_in_a_task_fails_the_attempt_not_the_worker(redis_client, settings):
    settings.DELAYQ = {**settings.DELAYQ, "RETRY_BACKOFF": 0.0}
    bad = schedule(exits)
    good = schedule(add, args=[1, 2])
    drain()
    assert (row(bad).status, row(bad).attempts) == (Status.FAILED, 2)
    assert row(bad).last_error == "SystemExit: 3"
    assert row(good).status == Status.SUCCEEDED


def test_a_success_clears_the_previous_attempts_error(redis_client, settings):
    settings.DELAYQ = {**settings.DELAYQ, "RETRY_BACKOFF": 0.0}
    task = schedule(fails_once, args=["clears"])
    drain()
    done = row(task)
    assert (done.status, done.attempts, done.result) == (
        Status.SUCCEEDED,
        2,
        "clears",
    )
    assert done.last_error == ""
    assert done.last_traceback == ""


def test_receivers_connected_for_the_delayedtask_sender_are_called(redis_client):
    results = []

    def receiver(sender, task, result, **kwargs):
        results.append(result)

    task_succeeded.connect(receiver, sender=DelayedTask)
    try:
        schedule(add, args=[20, 22])
        drain()
    finally:
        task_succeeded.disconnect(receiver, sender=DelayedTask)
    assert results == [42]


def test_entries_of_every_shard_read_together_all_run(redis_client):
    tasks = [schedule(record, args=[f"k{i}"]) for i in range(12)]
    assert len({t.shard for t in tasks}) > 1
    Dispatcher(queues=["orders"]).run(once=True)
    Worker(queues=["orders"]).run(once=True)
    assert {row(t).status for t in tasks} == {Status.SUCCEEDED}
    assert Ledger.objects.count() == 12


def test_a_task_due_in_a_moment_is_waited_for_not_bounced(redis_client):
    task = schedule(record, args=["soon"], delay=0.3)
    ready = shard_keys("delayq", "orders", task.shard)
    redis_client.zrem(ready.due, task.pk.bytes)
    redis_client.xadd(ready.ready, {"id": task.pk.bytes})
    Worker(queues=["orders"]).run(once=True)
    assert row(task).status == Status.SUCCEEDED
    [entry] = Ledger.objects.all()
    assert entry.at >= row(task).run_at


def test_dispatchers_of_different_queue_sets_drain_every_shard(redis_client):
    both = Dispatcher(queues=["default", "orders"], lease_ttl=1.0)
    orders = Dispatcher(queues=["orders"], lease_ttl=1.0)
    client = redis_client
    for _ in range(4):  # a few lease checks each, interleaved
        both.leases.keep(client)
        orders.leases.keep(client)
    owned = {s.label for d in (both, orders) for s in d.shards if s.owned}
    assert owned == {"default:0"} | {f"orders:{n}" for n in range(4)}


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        ("delayq_worker", ["--concurrency", "0"], "concurrency must be"),
        ("delayq_worker", ["--visibility-timeout", "-1"], "visibility_timeout"),
        ("delayq_worker", ["--queue", "nope"], "queue='nope' is not configured"),
        ("delayq_dispatch", ["--batch-size", "0"], "batch_size must be"),
        ("delayq_sweep", ["--interval", "0"], "--interval must be"),
        # Not a finite number: refused up front, never a traceback later.
        ("delayq_worker", ["--visibility-timeout", "inf"], "at most 86400"),
        ("delayq_worker", ["--visibility-timeout", "nan"], "at most 86400"),
        ("delayq_dispatch", ["--lease-ttl", "inf"], "lease_ttl must be from 1"),
        ("delayq_dispatch", ["--lease-ttl", "nan"], "lease_ttl must be from 1"),
        ("delayq_sweep", ["--interval", "nan"], "--interval must be"),
        ("delayq_sweep", ["--interval", "inf"], "--interval must be"),
        ("delayq_worker", ["--group-budget", "inf"], "group_budget must be"),
        ("delayq_worker", ["--grace-period", "nan"], "grace-period"),
    ],
)
def test_bad_options_are_command_errors(command, args, message):
    with pytest.raises(CommandError, match=message):
        call_command(command, *args)


def test_call_command_leaves_the_callers_signal_handlers_alone(redis_client):
    before = signal.getsignal(signal.SIGTERM)
    call_command("delayq_dispatch", "--once", verbosity=0)
    call_command("delayq_worker", "--once", verbosity=0)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_task_whose_on_commit_callback_raises_still_succeeded(redis_client, caplog):
    from tests.testapp.models import Order
    from tests.testapp.tasks import raises_on_commit

    task = schedule(raises_on_commit, args=["committed"])
    with caplog.at_level("ERROR", logger="django_delayq"):
        drain()
    assert row(task).status == Status.SUCCEEDED
    assert Order.objects.filter(status="committed").count() == 1
    assert "an on_commit callback it registered raised" in caplog.text


def test_using_another_database_than_the_workers_read_is_refused():
    with pytest.raises(InvalidArgument, match="using='other'"):
        schedule(add, args=[1, 1], using="other")
    assert not DelayedTask.objects.exists()


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("delayq_worker", "worker failed: ConnectionError"),
        ("delayq_dispatch", "dispatch failed: ConnectionError"),
        ("delayq_sweep", "sweep failed: ConnectionError"),
    ],
)
def test_once_with_redis_unreachable_is_a_command_error(settings, command, message):
    """One pass asked for and impossible: a clear error, not a traceback,
    and not a retry loop."""
    settings.DELAYQ = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    connection.reset()
    try:
        with pytest.raises(CommandError, match=message):
            call_command(command, "--once", verbosity=0)
    finally:
        connection.reset()


def test_an_idle_worker_stops_without_waiting_out_its_blocked_reads(redis_client):
    """stop() ends the threads' blocking reads (it shuts their sockets
    down), so an idle worker exits at once, not when its reads would have
    timed out."""
    worker = Worker(queues=["default"], concurrency=3)
    runner = threading.Thread(target=worker.run)
    runner.start()
    name = connection.blocking_client_name()

    def blocked() -> int:
        return sum(
            1
            for info in redis_client.client_list(_type="normal")
            if info.get("name") == name and "b" in info.get("flags", "")
        )

    wait_for(lambda: blocked() == 3, 10, "three threads blocked in their reads")
    worker.stop()
    # Each read would block for READ_BLOCK_MS (5 s) on the server.
    runner.join(timeout=READ_BLOCK_MS / 1000 - 1)
    assert not runner.is_alive()
    assert blocked() == 0


def test_a_worker_run_inside_a_transaction_is_refused_saying_what_to_use(
    redis_client,
):
    """What a test inside django.test.TestCase meets: on PostgreSQL the
    threads would find nothing (the rows are not committed), on SQLite they
    would be locked out."""
    from django.db import transaction

    task = schedule(add, args=[1, 2])
    call_command("delayq_dispatch", once=True, verbosity=0)
    with transaction.atomic(), pytest.raises(CommandError) as refused:
        call_command("delayq_worker", once=True, verbosity=0)
    assert "cannot run inside a transaction" in str(refused.value)
    assert "TransactionTestCase" in str(refused.value)
    assert row(task).status == Status.SCHEDULED  # nothing was taken
    drain()
    assert row(task).status == Status.SUCCEEDED
