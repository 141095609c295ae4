"""``manage.py delayq_status``: what it reports, and its exit status for probes."""

from __future__ import annotations

import datetime
import io
import json
import threading
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_delayq import schedule
from django_delayq.dispatcher import Dispatcher
from django_delayq.models import DelayedTask, OutboxEntry, PeriodicSchedule, Status
from django_delayq.recurring.planner import pause, plan
from django_delayq.sweeper import Sweeper
from django_delayq.worker import Worker
from tests.support.helpers import declared_schedule
from tests.testapp.tasks import add, count_run, record_tick
from tools.procs import wait_for

SECOND = datetime.timedelta(seconds=1)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def status(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("delayq_status", *args, stdout=out)
    except SystemExit as exited:
        return int(exited.code or 0), out.getvalue()
    return 0, out.getvalue()


@pytest.fixture
def loops(redis_client) -> Iterator[tuple[Dispatcher, Worker, Sweeper]]:
    """A dispatcher, a worker and a sweeper running, as in production."""
    dispatcher, worker, sweeper = Dispatcher(), Worker(), Sweeper()
    threads = [
        threading.Thread(target=dispatcher.run),
        threading.Thread(target=worker.run),
        threading.Thread(target=sweeper.run, kwargs={"interval": 1.0}),
    ]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: status()[0] == 0, 30, "dispatcher, worker and sweeper up")
        yield dispatcher, worker, sweeper
    finally:
        dispatcher.stop()
        worker.stop()
        sweeper.stop()
        for thread in threads:
            thread.join(timeout=30)


def test_healthy_with_a_dispatcher_a_worker_and_a_sweeper(loops):
    dispatcher, worker, sweeper = loops
    code, text = status()
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == "django-delayq: healthy"
    assert any(line.startswith("  shard ") and "dispatcher" in line for line in lines)
    assert f"Dispatcher {dispatcher.token}: default:0, orders:0" in text
    assert f"Worker {worker.name}: default, orders, reports" in text
    assert f"Sweeper {sweeper.token}: every 1 s, last pass ended at 20" in text


def test_no_sweeper_is_degraded_and_says_what_to_run(loops):
    _, _, sweeper = loops
    sweeper.stop()  # a graceful stop leaves the sweepers at once
    wait_for(lambda: status()[0] == 1, 30, "degraded without the sweeper")
    code, text = status("--json")
    report = json.loads(text)
    assert report["sweepers"] == {}
    assert report["problems"] == [
        "no sweeper has ended a pass within 3 of its intervals: nothing replays "
        "the outbox or repairs Redis after a data loss (run delayq_sweep)"
    ]
    # A pass run by hand (from cron, say) counts for a few of its intervals.
    call_command("delayq_sweep", "--once", "--interval", "600", stdout=io.StringIO())
    code, text = status()
    assert code == 0, text
    assert "every 600 s, last pass ended at" in text


def test_tasks_failed_in_the_last_hour_are_shown_not_judged(loops):
    now = timezone.now()
    for minutes_ago in (5, 50, 70):
        task = schedule(add, args=[1, 2], delay=3600)
        DelayedTask.objects.filter(pk=task.pk).update(
            status=Status.FAILED,
            finished_at=now - datetime.timedelta(minutes=minutes_ago),
        )
    code, text = status()
    assert code == 0, text
    assert "Failed in the last hour: 2\n" in text
    assert json.loads(status("--json")[1])["failed_last_hour"] == 2


def test_json_for_scripts(loops):
    code, text = status("--json")
    report = json.loads(text)
    assert (code, report["status"], report["problems"]) == (0, "healthy", [])
    assert {shard["shard"] for shard in report["shards"]} == {
        "default:0",
        "orders:0",
        "orders:1",
        "orders:2",
        "orders:3",
        "reports:0",
    }
    assert all(shard["dispatcher"] for shard in report["shards"])


def test_degraded_without_dispatcher_or_worker_and_with_old_work(redis_client):
    late = timezone.now() - datetime.timedelta(minutes=5)
    task = schedule(add, args=[1, 2], eta=late)
    OutboxEntry.objects.create(
        task_id=task.pk,
        queue=task.queue,
        shard=task.shard,
        action=OutboxEntry.Action.SCHEDULE,
        created_at=late,
    )
    code, text = status("--overdue", "60")
    assert code == 1
    assert text.startswith("django-delayq: degraded\n")
    assert "1 task(s) overdue by more than 60 s" in text
    assert "1 outbox entry older than 60 s" in text
    assert "no dispatcher leases shard default:0 (is delayq_dispatch running?)" in text
    assert "no live worker serves queue 'orders' (is delayq_worker running?)" in text
    # A threshold past the task's lateness: only the missing loops remain.
    code, text = status("--overdue", "3600")
    assert code == 1
    assert "overdue" not in text
    assert "outbox entry older" not in text


def test_down_when_redis_does_not_answer(private_redis):
    private_redis.stop()
    code, text = status("--json")
    report = json.loads(text)
    assert (code, report["status"]) == (2, "down")
    assert report["redis"].startswith("unreachable: ConnectionError")
    assert report["database"] == "reachable"
    assert not DelayedTask.objects.exists()


def test_a_bad_threshold_is_a_command_error():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="--overdue must be from 0 to 2592000"):
        call_command("delayq_status", "--overdue", "nan")


def test_a_kept_periodic_schedule_is_shown_and_healthy(loops):
    with declared_schedule("every-second", count_run, every=SECOND):
        wait_for(
            lambda: PeriodicSchedule.objects.filter(name="every-second").exists(),
            10,
            "the dispatcher's keeper plans the schedule",
        )
        code, text = status()
        assert code == 0, text
        assert "Periodic schedules: 1 (active 1), behind 0\n" in text
        (shown,) = json.loads(status("--json")[1])["periodic"]
        assert (shown["name"], shown["state"], shown["behind"]) == (
            "every-second",
            "active",
            False,
        )


def periodic_problems(text: str) -> list[str]:
    return [line for line in text.splitlines() if "periodic schedule" in line]


def test_periodic_schedules_behind_make_it_degraded(redis_client):
    """No process keeps the schedules here: the test moves their rows as a
    stopped keeper or a stopped dispatcher would leave them."""
    with declared_schedule("kept", record_tick, every=SECOND):
        plan()  # as a keeper would: planned a few seconds ahead
        code, text = status()
        assert periodic_problems(text) == []
        assert "Periodic schedules: 1 (active 1), behind 0\n" in text
        with declared_schedule("new", count_run, every=SECOND):
            # Declared by the code, planned by nothing yet.
            assert periodic_problems(status()[1]) == [
                "  - 1 periodic schedule(s) not planned for more than 10 s (new): "
                "nothing writes their ticks (is delayq_dispatch, or delayq_sweep "
                "without --once, running?)"
            ]
        now = timezone.now()
        row = PeriodicSchedule.objects.filter(name="kept")
        planned_through = row.get().planned_through
        row.update(planned_through=now - datetime.timedelta(seconds=11))
        code, text = status("--json")
        assert code == 1
        report = json.loads(text)
        assert report["periodic"] == [
            {
                "name": "kept",
                "state": "active",
                "behind": True,
                "planned_through": (now - datetime.timedelta(seconds=11)).isoformat(
                    timespec="milliseconds"
                ),
                "late_ticks": 0,
                "oldest_late_tick": None,
            }
        ]
        assert any(
            problem.startswith(
                "1 periodic schedule(s) not planned for more than 10 s (kept)"
            )
            for problem in report["problems"]
        )
        # Planned, but a tick has not started 11 s after its time.
        row.update(planned_through=planned_through)
        tick = DelayedTask.objects.filter(key__startswith="periodic:kept@").first()
        DelayedTask.objects.filter(pk=tick.pk).update(
            run_at=now - datetime.timedelta(seconds=11)
        )
        code, text = status()
        assert code == 1
        assert periodic_problems(text) == [
            "  - 1 periodic schedule(s) with ticks not started more than 10 s "
            "after their time (kept): is delayq_dispatch running, and "
            "delayq_worker for their queues?"
        ]
        assert "Periodic schedules: 1 (active 1), behind 1\n" in text
        # A paused schedule is not behind, whatever its rows say.
        pause("kept")
        row.update(planned_through=now - datetime.timedelta(minutes=5))
        code, text = status()
        assert periodic_problems(text) == []
        assert "Periodic schedules: 1 (paused 1), behind 0\n" in text
