"""Tasks due together run in groups: one claim, one outcome statement and one
commit per group, and each task's effects still stand or fall on their own."""

from __future__ import annotations

import threading

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from django_delayq import schedule, schedule_many
from django_delayq.api import Call
from django_delayq.dispatcher import Dispatcher
from django_delayq.models import DelayedTask, Status
from django_delayq.store import streams
from django_delayq.store.keys import shard_keys
from django_delayq.worker import Worker
from django_delayq.worker.batch import Batch
from django_delayq.worker.group_commit import Pacer
from django_delayq.worker.time_limits import Watchdog
from tests.support.helpers import claim, drain, refresh
from tests.testapp.models import Order
from tests.testapp.tasks import (
    add,
    committed_keys,
    counts_then_orders,
    create_order,
    create_order_non_atomic,
    create_order_or_raise,
    holds_first_row,
    notes_on_commit,
    order_with_pk,
    raises_on_commit,
    slow_order,
    swallows_db_error,
    updates_in_order,
)

pytestmark = pytest.mark.django_db(transaction=True)

READY = shard_keys("delayq", "default", 0).ready
DEAD = shard_keys("delayq", "default", 0).dead


def _read_all(redis_client) -> list[streams.Entry]:
    """Dispatch what is due and read it as one worker thread would."""
    Dispatcher().run(once=True)
    streams.ensure_groups(redis_client, [READY])
    return streams.read(redis_client, "test", [READY], count=1000, block_ms=None)


def _batch(redis_client, pacer: Pacer | None = None) -> Batch:
    return Batch(
        redis_client,
        "test",
        dead={READY: DEAD},
        pacer=pacer or Pacer(budget=5.0, max_size=100),
        release=lambda entries: None,
        early_wait=1.0,
        watchdog=Watchdog(),
    )


def _task_statements(queries: CaptureQueriesContext, verb: str) -> int:
    table = DelayedTask._meta.db_table
    return sum(
        1
        for query in queries.captured_queries
        if query["sql"].lstrip().upper().startswith(verb) and table in query["sql"]
    )


def test_a_group_claims_and_records_its_tasks_in_one_statement_each(redis_client):
    tasks = schedule_many(Call(create_order, args=[f"o{i}"]) for i in range(10))
    entries = _read_all(redis_client)
    with CaptureQueriesContext(connection) as queries:
        counts = _batch(redis_client).handle(list(entries))
    assert counts.processed == 10
    # One claim and one outcome statement for ten tasks, not ten of each.
    assert _task_statements(queries, "UPDATE") == 2
    rows = [refresh(task) for task in tasks]
    assert {row.status for row in rows} == {Status.SUCCEEDED}
    assert {row.attempts for row in rows} == {1}
    assert Order.objects.count() == 10
    # Each row keeps its own return value and the moment its function began.
    assert sorted(row.result for row in rows) == sorted(
        Order.objects.values_list("pk", flat=True)
    )
    for row in rows:
        assert row.run_at <= row.started_at <= row.finished_at
    assert len({row.started_at for row in rows}) == 10
    # Every entry was acknowledged and deleted in one go.
    assert redis_client.xlen(READY) == 0
    assert redis_client.xpending(READY, streams.GROUP)["pending"] == 0


def test_a_task_that_raises_takes_only_its_own_writes_with_it(redis_client):
    good = [schedule(create_order_or_raise, args=[f"good{i}"]) for i in range(3)]
    bad = schedule(create_order_or_raise, args=["bad"])
    more = [schedule(create_order_or_raise, args=[f"more{i}"]) for i in range(3)]
    _batch(redis_client).handle(_read_all(redis_client))
    for task in good + more:
        assert refresh(task).status == Status.SUCCEEDED
    row = refresh(bad)
    # Retried later, with its error kept; its order was rolled back.
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert row.last_error == "ValueError: bad order"
    assert "Traceback" in row.last_traceback
    assert sorted(Order.objects.values_list("status", flat=True)) == sorted(
        [f"good{i}" for i in range(3)] + [f"more{i}" for i in range(3)]
    )


def test_results_of_every_shape_are_stored_from_one_group(redis_client):
    summed = schedule(add, args=[2, 3])
    nothing = schedule(create_order_non_atomic, args=["n"])
    ordered = schedule(create_order, args=["x"])
    drain()
    assert refresh(summed).result == 5
    assert refresh(ordered).result == Order.objects.get(status="x").pk
    assert refresh(nothing).status == Status.SUCCEEDED  # atomic=False: alone


def test_a_fenced_attempt_rolls_back_only_itself_and_the_others_still_run(
    redis_client,
):
    tasks = [schedule(create_order, args=[f"o{i}"]) for i in range(4)]
    entries = _read_all(redis_client)
    # While this worker holds them, another worker takes the third attempt
    # over (this one was paused past its visibility timeout).
    taken = tasks[2]

    def take_over(sender, task, **kwargs):
        if task.pk == taken.pk:
            DelayedTask.objects.filter(pk=taken.pk).update(
                attempts=2, claim_entry="9-0"
            )

    from django_delayq.signals import task_started

    task_started.connect(take_over)
    try:
        _batch(redis_client).handle(list(entries))
    finally:
        task_started.disconnect(take_over)
    row = refresh(taken)
    assert (row.status, row.attempts, row.claim_entry) == (Status.RUNNING, 2, "9-0")
    assert not Order.objects.filter(status="o2").exists()
    for task in tasks[:2] + tasks[3:]:
        assert refresh(task).status == Status.SUCCEEDED
    # Each of the others took effect exactly once.
    assert sorted(Order.objects.values_list("status", flat=True)) == ["o0", "o1", "o3"]
    # The taken-over entry is left to the worker that owns the attempt now.
    assert redis_client.xpending(READY, streams.GROUP)["pending"] == 1


def test_a_group_closes_on_its_time_budget(redis_client):
    slow = schedule(slow_order, args=["slow", 0.2])
    quick = [schedule(create_order, args=[f"q{i}"]) for i in range(3)]
    pacer = Pacer(budget=0.05, max_size=100)
    _batch(redis_client, pacer).handle(_read_all(redis_client))
    for task in [slow, *quick]:
        assert refresh(task).status == Status.SUCCEEDED
    # The slow task commits before its neighbours run: a group must not
    # wait for it. One long run is a strike; three in a row and its name
    # runs alone for a while (tests/benchmarks/test_pacer.py).
    assert refresh(slow).finished_at <= min(refresh(t).started_at for t in quick)
    assert pacer.strikes == {"tests.testapp.tasks.slow_order": 1}


def test_a_task_delivered_twice_in_one_batch_runs_once(redis_client):
    task = schedule(create_order, args=["twice"])
    Dispatcher().run(once=True)
    redis_client.xadd(READY, {"id": redis_client.xrange(READY)[0][1][b"id"]})
    Worker(prefetch=10).run(once=True)
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.SUCCEEDED, 1)
    assert Order.objects.filter(status="twice").count() == 1
    assert redis_client.xlen(READY) == 0


def test_a_reclaimed_delivery_next_to_fresh_ones_takes_over_its_attempt(
    redis_client,
):
    lost = schedule(create_order, args=["lost"])
    fresh = schedule(create_order, args=["fresh"])
    entries = _read_all(redis_client)
    [lost_entry] = [e for e in entries if e.task_id == lost.pk]
    assert claim(refresh(lost), lost_entry.entry_id.decode()) == 1
    reclaimed = streams.Entry(
        lost_entry.stream, lost_entry.entry_id, lost_entry.fields, reclaimed=True
    )
    pending = [reclaimed if e.task_id == lost.pk else e for e in entries]
    _batch(redis_client).handle(pending)
    assert (refresh(lost).status, refresh(lost).attempts) == (Status.SUCCEEDED, 2)
    assert refresh(fresh).status == Status.SUCCEEDED
    assert Order.objects.count() == 2


def test_a_task_that_swallows_a_database_error_fails_and_leaves_no_writes(
    redis_client,
):
    swallowed = schedule(swallows_db_error, args=["swallowed"])
    fine = [schedule(create_order, args=[f"fine{i}"]) for i in range(2)]
    _batch(redis_client).handle(_read_all(redis_client))
    row = refresh(swallowed)
    assert row.status == Status.FAILED
    assert "marked for rollback" in row.last_error
    assert not Order.objects.filter(status="swallowed").exists()
    assert {refresh(task).status for task in fine} == {Status.SUCCEEDED}


def test_on_commit_callbacks_of_a_failed_task_in_a_group_never_run(redis_client):
    committed_keys.clear()
    schedule(notes_on_commit, args=["a"])
    schedule(notes_on_commit, args=["b"], kwargs={"fail": True})
    schedule(notes_on_commit, args=["c"])
    _batch(redis_client).handle(_read_all(redis_client))
    assert sorted(committed_keys) == ["a", "c"]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("group_size", 0, "group_size must be from 1 to 1000; got 0."),
        ("group_budget", 0.0, "group_budget must be more than 0 and at most 60"),
    ],
)
def test_bad_group_options_are_command_errors(option, value, message):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=message):
        call_command("delayq_worker", once=True, verbosity=0, **{option: value})


def test_group_size_one_commits_every_task_on_its_own(redis_client):
    from django.core.management import call_command

    tasks = [schedule(create_order_or_raise, args=[s]) for s in ("a", "bad", "b")]
    Dispatcher().run(once=True)
    call_command("delayq_worker", once=True, verbosity=0, group_size=1)
    statuses = [refresh(task).status for task in tasks]
    assert statuses == [Status.SUCCEEDED, Status.SCHEDULED, Status.SUCCEEDED]
    assert sorted(Order.objects.values_list("status", flat=True)) == ["a", "b"]


def test_a_savepoint_is_made_only_for_tasks_that_run_sql(redis_client):
    schedule_many(Call(add, args=[i, i]) for i in range(5))
    schedule_many(Call(create_order, args=[f"o{i}"]) for i in range(3))
    entries = _read_all(redis_client)
    with CaptureQueriesContext(connection) as queries:
        _batch(redis_client).handle(list(entries))
    savepoints = [
        q for q in queries.captured_queries if q["sql"].startswith("SAVEPOINT")
    ]
    assert len(savepoints) == 3  # one per task that wrote, none for add()
    assert DelayedTask.objects.filter(status=Status.SUCCEEDED).count() == 8


def test_a_callback_that_raises_does_not_cost_a_neighbour_its_callbacks(
    redis_client,
):
    committed_keys.clear()
    schedule(raises_on_commit, args=["broken"])
    schedule(notes_on_commit, args=["kept"])
    _batch(redis_client).handle(_read_all(redis_client))
    assert committed_keys == ["kept"]
    assert DelayedTask.objects.filter(status=Status.SUCCEEDED).count() == 2
    assert Order.objects.filter(status="broken").exists()


def test_a_task_whose_first_statement_fails_takes_only_itself_down(redis_client):
    """The first statement of a task goes out with its savepoint (in one
    round trip on PostgreSQL): when that statement fails, the savepoint is
    there to roll back to, and the neighbours' work stands."""
    Order.objects.create(pk=1000, status="taken")
    before = schedule(order_with_pk, args=[1001])
    clash = schedule(order_with_pk, args=[1000])
    after = schedule(order_with_pk, args=[1002])
    _batch(redis_client).handle(_read_all(redis_client))
    assert (refresh(before).status, refresh(after).status) == (
        Status.SUCCEEDED,
        Status.SUCCEEDED,
    )
    row = refresh(clash)
    assert row.status == Status.FAILED
    assert row.last_error.startswith("IntegrityError")
    assert sorted(Order.objects.values_list("status", flat=True)) == [
        "pk1001",
        "pk1002",
        "taken",
    ]


def test_a_task_whose_first_statement_reads_through_a_cursor_runs_in_a_group(
    redis_client,
):
    Order.objects.bulk_create(Order(status=f"old{i}") for i in range(5))
    tasks = [schedule(counts_then_orders, args=[f"new{i}"]) for i in range(3)]
    _batch(redis_client).handle(_read_all(redis_client))
    assert sorted(refresh(task).result for task in tasks) == [5, 6, 7]
    assert Order.objects.count() == 8


def test_a_deadlock_in_a_group_keeps_nothing_and_runs_each_task_again_alone(
    redis_client,
):
    """MySQL and MariaDB roll a deadlock's victim back whole, savepoints and
    all; the group's earlier tasks must not be recorded as done. (PostgreSQL
    rolls back to the task's savepoint: only the victim fails.)"""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has one writer at a time: no deadlock to lose")
    first, second = Order.objects.create(), Order.objects.create()
    # Each in a group with a neighbour that writes first.
    before = schedule(create_order, args=["before"])
    victim = schedule(updates_in_order, args=[first.pk, second.pk])
    holds_first_row.clear()
    ready = threading.Event()

    def other_transaction() -> None:
        # Heavier than the group's (more rows changed), so that InnoDB picks
        # the group as the victim; takes the rows the other way round.
        try:
            with transaction.atomic():
                Order.objects.bulk_create(Order(status="filler") for _ in range(50))
                Order.objects.filter(pk=second.pk).update(status="other")
                ready.set()
                assert holds_first_row.wait(30)
                Order.objects.filter(pk=first.pk).update(status="other")
        except DatabaseError:
            pass  # the victim, on a database that picked it instead
        finally:
            connection.close()

    thread = threading.Thread(target=other_transaction)
    thread.start()
    assert ready.wait(30)
    entries = _read_all(redis_client)
    _batch(redis_client).handle(entries)
    thread.join(60)
    assert refresh(before).status == Status.SUCCEEDED
    # Its order exists once: the group's rolled-back write is not counted as
    # its success, and running it again alone wrote it once.
    assert Order.objects.filter(status="before").count() == 1
    row = refresh(victim)
    if row.status == Status.SUCCEEDED:
        assert Order.objects.get(pk=second.pk).status == "second"
    else:
        # It was the deadlock's victim alone (PostgreSQL): a retry is due.
        assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
        assert "deadlock" in row.last_error.lower()
