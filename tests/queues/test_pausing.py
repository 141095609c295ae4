"""Pausing and resuming queues: the command, the API, the mirror in Redis,
and a worker and a sweeper against both (real Redis, real database)."""

from __future__ import annotations

import datetime
import io
import json
import re

import pytest
import redis
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_delayq import pause_queue, paused_queues, resume_queue, schedule
from django_delayq.dispatcher import Dispatcher
from django_delayq.exceptions import UnknownQueue
from django_delayq.models import DelayedTask, PausedQueue, Status
from django_delayq.queues import mirror
from django_delayq.store import pauses, streams
from django_delayq.store.keys import paused_key, shard_keys
from django_delayq.sweeper import Sweeper
from django_delayq.worker import Worker
from django_delayq.worker.inflight import InFlight
from tests.testapp.models import Ledger
from tests.testapp.tasks import record

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

PREFIX = "delayq"
REPORTS = shard_keys(PREFIX, "reports", 0)


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("delayq_queue", *args, stdout=out)
    return out.getvalue()


def mirrored(client: redis.Redis) -> set[str] | None:
    paused = pauses.read(client, PREFIX).paused
    return None if paused is None else set(paused)


def schedule_in_due_order(queue: str, count: int) -> list[DelayedTask]:
    """``count`` tasks already due, each due a millisecond after the last,
    scheduled in the reverse order."""
    base = timezone.now() - datetime.timedelta(seconds=1)
    return [
        schedule(
            record,
            args=[f"{queue}-{i}"],
            queue=queue,
            eta=base + datetime.timedelta(milliseconds=i),
        )
        for i in reversed(range(count))
    ]


def test_pause_pauses_once_and_says_so_the_second_time(
    redis_client: redis.Redis,
) -> None:
    out = command("pause", "orders", "--reason", "a deploy", "--by", "ops")
    assert out == "queue orders paused\n"
    row = PausedQueue.objects.get()
    assert (row.name, row.paused_by, row.reason) == ("orders", "ops", "a deploy")
    assert mirrored(redis_client) is None  # no mirror yet: unknown, not empty
    assert redis_client.hget(paused_key(PREFIX), "orders") is not None

    out = command("pause", "orders")
    assert out == "queue orders was paused already (nothing changed)\n"
    assert PausedQueue.objects.get().reason == "a deploy"


def test_resume_and_list(redis_client: redis.Redis) -> None:
    assert command("list") == "no queue is paused\n"
    command("pause", "orders", "reports", "--by", "ops", "--reason", "why")
    listed = command("list").splitlines()
    assert [line.split()[0] for line in listed] == ["orders", "reports"]
    assert listed[0].endswith(" by ops: why")
    assert [q["queue"] for q in json.loads(command("list", "--json"))] == [
        "orders",
        "reports",
    ]

    assert command("resume", "orders") == "queue orders resumed\n"
    assert command("resume", "orders") == (
        "queue orders was not paused (nothing changed)\n"
    )
    assert [row.name for row in paused_queues()] == ["reports"]
    assert redis_client.hget(paused_key(PREFIX), "orders") is None


def test_an_unknown_queue_is_refused_by_name_and_nothing_is_paused(
    redis_client: redis.Redis,
) -> None:
    with pytest.raises(CommandError) as raised:
        command("pause", "orders", "ordres")
    assert str(raised.value) == (
        "unknown queue(s): ordres; the configured queues are: default, orders, "
        "reports (DELAYQ['QUEUES'] and 'default')."
    )
    assert not PausedQueue.objects.exists()
    with pytest.raises(CommandError, match="unknown queue"):
        command("resume", "nope")
    with pytest.raises(UnknownQueue, match="'nope' is not configured"):
        pause_queue("nope")
    with pytest.raises(UnknownQueue):
        resume_queue("nope")


def test_a_paused_queue_that_is_no_longer_configured_can_be_resumed(
    redis_client: redis.Redis,
) -> None:
    PausedQueue.objects.create(name="gone")
    assert command("resume", "gone") == "queue gone resumed\n"


def test_the_api_is_transactional_and_idempotent(redis_client: redis.Redis) -> None:
    from django.db import transaction

    with transaction.atomic():
        assert pause_queue("reports", by="me") is True
        # Not mirrored before the commit.
        assert redis_client.hget(paused_key(PREFIX), "reports") is None
    assert redis_client.hget(paused_key(PREFIX), "reports") is not None
    assert pause_queue("reports") is False
    assert resume_queue("reports") is True
    assert resume_queue("reports") is False


def test_a_worker_starts_nothing_of_a_paused_queue_and_the_resume_runs_it_in_due_order(
    redis_client: redis.Redis,
) -> None:
    pause_queue("reports")
    schedule_in_due_order("reports", 5)
    other = schedule(record, args=["orders-task"])
    assert Dispatcher().run(once=True).moved == 6

    assert Worker().run(once=True).processed == 1  # the other queue's only
    assert list(Ledger.objects.values_list("key", flat=True)) == ["orders-task"]
    assert DelayedTask.objects.get(pk=other.pk).status == Status.SUCCEEDED
    # Left in the stream, unread: no worker holds them.
    assert redis_client.xlen(REPORTS.ready) == 5
    assert redis_client.xpending(REPORTS.ready, "workers")["pending"] == 0

    resume_queue("reports")
    assert Worker(concurrency=1).run(once=True).processed == 5
    ran = Ledger.objects.exclude(key="orders-task").order_by("pk")
    assert list(ran.values_list("key", flat=True)) == [f"reports-{i}" for i in range(5)]


def test_a_flushall_resumes_no_queue(redis_client: redis.Redis) -> None:
    pause_queue("reports")
    mirror()
    assert mirrored(redis_client) == {"reports"}
    redis_client.flushall()
    schedule_in_due_order("reports", 3)
    Dispatcher().run(once=True)
    assert redis_client.xlen(REPORTS.ready) == 3

    # The mirror is gone: the worker asks the rows, and writes it again.
    assert Worker().run(once=True).processed == 0
    assert not Ledger.objects.exists()
    assert mirrored(redis_client) == {"reports"}


def test_the_sweeper_mirrors_the_rows_after_a_loss_or_a_failed_write(
    redis_client: redis.Redis,
) -> None:
    pause_queue("reports")
    redis_client.flushall()
    Sweeper().sweep()
    assert mirrored(redis_client) == {"reports"}
    # A pause whose Redis write never happened (Redis was down).
    PausedQueue.objects.create(name="orders")
    # And a resume whose write never happened.
    PausedQueue.objects.filter(name="reports").delete()
    Sweeper().sweep()
    assert mirrored(redis_client) == {"orders"}


def test_a_mirror_from_rows_read_before_a_pause_does_not_overwrite_it(
    redis_client: redis.Redis,
) -> None:
    seen = pauses.read(redis_client, PREFIX)  # a rebuild reads the version...
    pause_queue("orders")  # ...a pause commits and writes...
    # ...and the rebuild's rows, read before the pause, are not written.
    assert not pauses.replace(redis_client, PREFIX, seen.version, {})
    assert redis_client.hget(paused_key(PREFIX), "orders") is not None
    rows, replaced = mirror(redis_client)
    assert replaced
    assert set(rows) == {"orders"}
    assert mirrored(redis_client) == {"orders"}


def entry(stream: str, number: int) -> streams.Entry:
    return streams.Entry(stream, f"{number}-0".encode(), {})


def test_entries_of_a_paused_queue_are_held_and_come_back_first_on_resume() -> None:
    other = shard_keys(PREFIX, "orders", 0).ready
    in_flight = InFlight([REPORTS.ready, other])
    in_flight.wait([entry(REPORTS.ready, 1), entry(other, 2), entry(REPORTS.ready, 3)])
    paused = frozenset({REPORTS.ready})

    assert in_flight.take(10, paused) == [entry(other, 2)]
    assert in_flight.waiting() == 0  # held apart: readers are not held up
    in_flight.wait([entry(other, 4)])
    assert in_flight.take(10, paused) == [entry(other, 4)]
    assert in_flight.take(10) == [entry(REPORTS.ready, 1), entry(REPORTS.ready, 3)]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("pause",), "pause needs at least one queue name."),
        (("resume",), "resume needs at least one queue name."),
        (("list", "orders"), "list takes no queue name."),
        (
            ("resume", "orders", "--reason", "x"),
            "--reason and --by go with pause only.",
        ),
        (("pause", "orders", "--json"), "--json goes with list only."),
    ],
)
def test_an_option_or_name_out_of_place_is_refused(
    args: tuple[str, ...], error: str
) -> None:
    with pytest.raises(CommandError, match=f"^{re.escape(error)}$"):
        command(*args)
    assert not PausedQueue.objects.exists()


def test_status_shows_a_paused_queue_and_does_not_count_its_tasks_overdue(
    redis_client: redis.Redis,
) -> None:
    from django_delayq.status import Paused, collect

    pause_queue("reports", by="ops", reason="a migration")
    eta = timezone.now() - datetime.timedelta(minutes=5)
    schedule(record, args=["waits"], queue="reports", eta=eta)
    report = collect()
    assert report.overdue == 0
    [paused] = report.paused
    assert paused == Paused("reports", paused.paused_at, "ops", "a migration", 1)
    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("delayq_status", stdout=out)
    [line] = [x for x in out.getvalue().splitlines() if x.startswith("Paused:")]
    assert line.startswith("Paused: queue reports since ")
    assert line.endswith(" by ops (a migration); 1 task(s) due wait for its resume")

    resume_queue("reports")
    report = collect()
    assert report.overdue == 1
    assert report.paused == []


def test_the_paused_gauge(redis_client: redis.Redis) -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from django_delayq.metrics.collector import BacklogCollector
    from tests.support.metrics_scrape import parse, value

    pause_queue("reports")
    registry = CollectorRegistry()
    registry.register(BacklogCollector())
    samples = parse(generate_latest(registry).decode())
    assert value(samples, "delayq_queue_paused", queue="reports") == 1
    assert value(samples, "delayq_queue_paused", queue="orders") == 0
    assert value(samples, "delayq_queue_paused", queue="default") == 0
