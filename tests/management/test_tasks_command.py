"""``delayq_tasks``: filters, list and show, and the batched changes with
their confirmation, against the real database and Redis."""

from __future__ import annotations

import datetime
import io
import json
import subprocess
import sys
import uuid
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_delayq import changes, schedule
from django_delayq.management import bulk
from django_delayq.models import DelayedTask, Status
from tests.acceptance.processes import Processes, processes  # noqa: F401
from tests.support.helpers import expected_score, indexed_score, refresh
from tests.testapp.tasks import add, order_cancel, send_reminder
from tools.procs import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str, **options: Any) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("delayq_tasks", *args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def fail(task: DelayedTask) -> None:
    """Make ``task`` failed, as its last attempt would have left it."""
    DelayedTask.objects.filter(pk=task.pk).update(
        status=Status.FAILED,
        attempts=task.max_attempts,
        finished_at=timezone.now(),
        last_error="ValueError: boom",
        last_traceback="Traceback (most recent call last):\nValueError: boom",
    )


def listed(*args: str) -> list[dict[str, Any]]:
    out, _ = run("list", "--json", *args)
    return [json.loads(line) for line in out.splitlines()]


def in_pk_order() -> list[str]:
    """Every task id, in the database's order of ids (ids made in one
    millisecond are not ordered by creation)."""
    return [
        str(pk)
        for pk in DelayedTask.objects.order_by("pk").values_list("pk", flat=True)
    ]


def ids(*args: str) -> set[str]:
    return {row["id"] for row in listed(*args)}


# -- filters --------------------------------------------------------------------


def test_each_filter_selects_its_tasks(redis_client):
    now = timezone.now()
    a = schedule(add, delay=60, args=[1, 1], key="reminder:Ab:1")
    b = schedule(send_reminder, delay=3600, args=[1], key="reminder:ab:2")
    c = schedule(order_cancel, delay=7200, args=[1], key="order:1")
    d = schedule(add, delay=60, args=[2, 2])
    changes.cancel(d)
    fail(c)
    assert ids() == {str(t.pk) for t in (a, b, c, d)}
    assert ids("--name", "tests.testapp.tasks.add") == {str(a.pk), str(d.pk)}
    assert ids("--name", "reminders.send", "--name", "tests.testapp.tasks.add") == {
        str(a.pk),
        str(b.pk),
        str(d.pk),
    }
    assert ids("--queue", "orders") == {str(c.pk)}
    assert ids("--status", "failed", "--status", "cancelled") == {str(c.pk), str(d.pk)}
    # A prefix, case-sensitive on every database.
    assert ids("--key", "reminder:") == {str(a.pk), str(b.pk)}
    assert ids("--key", "reminder:ab") == {str(b.pk)}
    assert ids("--key", "reminder:AB") == set()
    # LIKE's wildcards in a prefix are plain characters.
    e = schedule(add, delay=60, args=[3, 3], key="x%_1")
    f = schedule(add, delay=60, args=[4, 4], key="xab1")
    assert ids("--key", "x%_") == {str(e.pk)}
    assert ids("--key", "x") == {str(e.pk), str(f.pk)}
    for task in (e, f):
        changes.cancel(task)
        DelayedTask.objects.filter(pk=task.pk).delete()
    # --after includes its moment, --before excludes it (both on run_at).
    due_b = refresh(b).run_at
    assert ids("--after", due_b.isoformat()) == {str(b.pk), str(c.pk)}
    assert ids("--before", due_b.isoformat()) == {str(a.pk), str(d.pk)}
    naive = timezone.localtime(due_b).replace(tzinfo=None).isoformat()
    assert ids("--before", naive) == {str(a.pk), str(d.pk)}
    hour = (now + datetime.timedelta(minutes=30)).isoformat()
    assert ids(
        "--after",
        hour,
        "--before",
        (now + datetime.timedelta(hours=1, minutes=30)).isoformat(),
    ) == {str(b.pk)}
    # Only finished tasks have a finished_at.
    assert ids(
        "--finished-after", (now - datetime.timedelta(minutes=1)).isoformat()
    ) == {
        str(c.pk),
        str(d.pk),
    }
    assert ids("--finished-before", now.isoformat()) == set()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--before", "yesterday"), "--before 'yesterday' is not a date and time"),
        (("--finished-after", "2026-13-01"), "--finished-after '2026-13-01'"),
        (("--status", "done"), "--status 'done' is not a status"),
        (("--key", ""), "--key '' matches every key"),
        (("--limit", "0"), "--limit must be 1 or more"),
    ],
)
def test_bad_filters_are_command_errors_naming_the_option(args, words):
    with pytest.raises(CommandError, match=words) as raised:
        run("list", *args)
    assert raised.value.returncode == 1


def test_a_change_refuses_statuses_it_cannot_change():
    with pytest.raises(CommandError, match="retry applies to failed tasks"):
        run("retry", "--status", "scheduled", "--yes")


# -- list and show ----------------------------------------------------------------


def test_list_prints_a_table_in_id_order_and_json_lines(redis_client):
    tasks = [schedule(add, delay=60, args=[i, i], key=f"k{i}") for i in range(3)]
    out, _ = run("list")
    lines = out.splitlines()
    assert lines[0].split() == [
        "id",
        "name",
        "queue",
        "status",
        "due",
        "attempts",
        "key",
    ]
    assert [line.split()[0] for line in lines[1:]] == in_pk_order()
    first = next(t for t in tasks if str(t.pk) == in_pk_order()[0])
    assert lines[1].split()[1:] == [
        "tests.testapp.tasks.add",
        "default",
        "scheduled",
        refresh(first).run_at.isoformat(timespec="seconds"),
        "0/3",
        first.key,
    ]
    rows = listed("--limit", "2")
    assert [row["id"] for row in rows] == in_pk_order()[:2]
    assert (rows[0]["key"], rows[0]["status"]) == (first.key, "scheduled")
    assert set(rows[0]) == set(bulk.LIST_FIELDS)


def test_list_reads_in_batches_without_skipping_or_repeating(redis_client):
    for i in range(7):
        schedule(add, delay=60, args=[i, i])
    rows = listed("--batch-size", "2")
    assert [row["id"] for row in rows] == in_pk_order()
    assert len(listed("--batch-size", "2", "--limit", "5")) == 5


def test_show_prints_one_task_in_full(redis_client):
    task = schedule(send_reminder, delay=60, args=[7], kwargs={"text": "hi <b>"})
    fail(task)
    out, _ = run("show", str(task.pk))
    assert f"\nid              {task.pk}\n" in f"\n{out}"
    assert '\nkwargs          {"text": "hi <b>"}\n' in out
    assert "\nlast_error      ValueError: boom\n" in out
    assert out.rstrip().endswith("    ValueError: boom")
    shown = json.loads(run("show", str(task.pk), "--json")[0])
    assert (shown["args"], shown["status"]) == ([7], "failed")
    assert shown["last_traceback"].startswith("Traceback")


def test_show_of_an_unknown_id_is_an_error():
    with pytest.raises(CommandError, match="No task has the id") as raised:
        run("show", str(uuid.uuid4()))
    assert raised.value.returncode == 1
    with pytest.raises(CommandError, match="is not a task id"):
        run("show", "42")


# -- changes ------------------------------------------------------------------------


def test_cancel_dry_run_changes_nothing_then_yes_cancels(redis_client):
    wrong = [
        schedule(send_reminder, delay=600, args=[i], key=f"r:{i}") for i in range(4)
    ]
    kept = schedule(send_reminder, delay=600, args=[9], key="other:9")
    out, _ = run("cancel", "--key", "r:", "--dry-run")
    assert "cancel: 4 task(s) match (scheduled, running); the first 4:" in out
    assert "dry run, would change up to 4 task(s); nothing changed." in out
    for task in [*wrong, kept]:
        assert refresh(task).status == Status.SCHEDULED
        assert indexed_score(redis_client, task) == expected_score(task)

    out, err = run("cancel", "--key", "r:", "--yes")
    assert out.splitlines()[-1] == (
        "cancel: cancelled 4, skipped 0 (changed meanwhile), failed 0"
    )
    assert "cancel: 4 of 4 (done 4, skipped 0, failed 0)" in err
    for task in wrong:
        assert refresh(task).status == Status.CANCELLED
        assert indexed_score(redis_client, task) is None
    assert refresh(kept).status == Status.SCHEDULED
    assert indexed_score(redis_client, kept) == expected_score(kept)


def test_a_running_task_is_reported_as_cancel_leaves_it(redis_client):
    task = schedule(add, delay=60, args=[1, 1], key="run:1")
    DelayedTask.objects.filter(pk=task.pk).update(status=Status.RUNNING, attempts=1)
    failure: CommandError | None = None
    try:
        run("cancel", "--key", "run:", "--yes")
    except CommandError as exc:
        failure = exc
    if refresh(task).status == Status.RUNNING:
        # cancel() returned False: the task runs on, and the command says so.
        assert failure is not None
        assert failure.returncode == 3
        assert "failed 1" in str(failure)
    else:
        # cancel() stops running tasks: it did.
        assert failure is None
        assert refresh(task).status == Status.CANCELLED


def test_a_cancel_over_several_batches_counts_each_task_once(redis_client):
    """Batches of three, one transaction each: a running task is cancelled
    too, and a task another call cancelled meanwhile no longer matches (the
    next batch is read after the last id seen, by the filters)."""
    tasks = [
        schedule(send_reminder, delay=600, args=[i], key=f"b:{i}") for i in range(7)
    ]
    DelayedTask.objects.filter(pk=tasks[4].pk).update(status=Status.RUNNING, attempts=1)
    rows = bulk.targets(
        bulk.CHANGES["cancel"], bulk.parse_filters({"key": "b:"})
    ).queryset("default")
    batches: list[int] = []

    def progress(tally: bulk.Tally) -> None:
        batches.append(tally.seen)
        if len(batches) == 1:  # between two batches
            assert changes.cancel(max(tasks, key=lambda t: t.pk))

    reported: list[Any] = []
    tally = bulk.apply_change(
        bulk.CHANGES["cancel"], rows, 3, lambda *seen: reported.append(seen), progress
    )
    assert batches == [3, 6]
    assert (tally.done, tally.skipped, tally.failed) == (6, 0, 0)
    assert reported == []
    for task in tasks:
        assert refresh(task).status == Status.CANCELLED
        assert indexed_score(redis_client, task) is None
    assert refresh(tasks[4]).last_error == "cancelled while running (attempt 1)"


def test_a_cancel_batch_says_why_each_task_it_left_was_left(redis_client):
    scheduled = schedule(add, delay=60, args=[1, 1])
    finished = schedule(add, delay=60, args=[2, 2])
    assert changes.cancel(finished)
    gone = uuid.uuid4()
    outcomes = bulk.CHANGES["cancel"].apply_batch([scheduled.pk, finished.pk, gone])
    assert outcomes == {
        scheduled.pk: (bulk.Outcome.DONE, ""),
        finished.pk: (bulk.Outcome.SKIPPED, "not cancelled: cancelled"),
        gone: (bulk.Outcome.SKIPPED, "not cancelled: deleted"),
    }


def test_not_confirmed_refuses_and_changes_nothing(redis_client, monkeypatch):
    task = schedule(add, delay=60, args=[1, 1])
    with pytest.raises(CommandError, match="Pass --yes") as raised:
        run("cancel")
    assert raised.value.returncode == 2

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal("no\n"))
    with pytest.raises(CommandError, match="not confirmed") as raised:
        run("cancel")
    assert raised.value.returncode == 2
    assert refresh(task).status == Status.SCHEDULED
    monkeypatch.setattr(sys, "stdin", Terminal("yes\n"))
    run("cancel")
    assert refresh(task).status == Status.CANCELLED


def test_nothing_matching_is_no_error():
    out, _ = run("cancel")
    assert out == "cancel: no task matches; nothing to do.\n"


def test_retry_schedules_the_failed_tasks_again(redis_client):
    failed = [schedule(add, delay=60, args=[i, i]) for i in range(3)]
    for task in failed:
        fail(task)
    other = schedule(add, delay=60, args=[9, 9])
    out, _ = run("retry", "--yes")
    assert out.splitlines()[-1] == (
        "retry: retried 3, skipped 0 (changed meanwhile), failed 0"
    )
    for task in failed:
        row = refresh(task)
        assert (row.status, row.attempts) == (Status.SCHEDULED, 0)
        assert indexed_score(redis_client, row) == expected_score(row)
    assert refresh(other).run_at == other.run_at


def test_retry_that_an_active_key_blocks_fails_and_exits_3(redis_client):
    task = schedule(add, delay=60, args=[1, 1], key="held")
    fail(task)
    holder = schedule(add, delay=60, args=[2, 2], key="held")
    with pytest.raises(CommandError, match="failed 1") as raised:
        run("retry", "--yes")
    assert raised.value.returncode == 3
    assert refresh(task).status == Status.FAILED
    assert refresh(holder).status == Status.SCHEDULED


def test_run_now_makes_the_scheduled_tasks_due_now(redis_client):
    later = [schedule(order_cancel, delay=3600, args=[i]) for i in range(3)]
    before = timezone.now()
    out, _ = run("run-now", "--queue", "orders", "--yes")
    assert out.splitlines()[-1].startswith("run-now: due now 3, skipped 0")
    for task in later:
        row = refresh(task)
        assert before <= row.run_at <= timezone.now()
        assert indexed_score(redis_client, row) == expected_score(row)


def test_changes_cross_batches_each_task_once(redis_client, monkeypatch):
    tasks = [schedule(add, delay=600, args=[i, i]) for i in range(11)]
    seen: list[uuid.UUID] = []
    cancel = bulk.CHANGES["cancel"]

    def counted(task_id: uuid.UUID) -> tuple[bulk.Outcome, str]:
        seen.append(task_id)
        return bulk._cancel(task_id)

    monkeypatch.setitem(
        bulk.CHANGES,
        "cancel",
        bulk.Change("cancel", cancel.applies_to, "cancelled", counted),
    )
    # One task of the filter is changed meanwhile (by another process): it is
    # skipped, not counted as done.
    original_batches = bulk.id_batches

    def batches_with_interference(rows, size):
        for number, batch in enumerate(original_batches(rows, size)):
            if number == 1:
                changes.cancel(batch[-1])
            yield batch

    monkeypatch.setattr(bulk, "id_batches", batches_with_interference)
    out, err = run("cancel", "--yes", "--batch-size", "3")
    assert sorted(seen) == sorted(t.pk for t in tasks)
    assert len(seen) == len(set(seen)) == 11
    assert [line for line in err.splitlines() if " of 11 " in line] == [
        "cancel: 3 of 11 (done 3, skipped 0, failed 0)",
        "cancel: 6 of 11 (done 5, skipped 1, failed 0)",
        "cancel: 9 of 11 (done 8, skipped 1, failed 0)",
        "cancel: 11 of 11 (done 10, skipped 1, failed 0)",
    ]
    assert "not cancelled: cancelled" in err
    assert out.splitlines()[-1] == (
        "cancel: cancelled 10, skipped 1 (changed meanwhile), failed 0"
    )
    assert DelayedTask.objects.filter(status=Status.CANCELLED).count() == 11


def test_without_a_terminal_and_without_yes_the_process_exits_2(
    redis_client,
    processes: Processes,  # noqa: F811
):
    task = schedule(add, delay=60, args=[1, 1], key="tty:1")
    done = subprocess.run(
        [sys.executable, "-m", "django", "delayq_tasks", "cancel", "--key", "tty:"],
        env=processes.env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr.decode()
    assert "Pass --yes to go ahead" in done.stderr.decode()
    assert "cancel: 1 task(s) match" in done.stdout.decode()
    assert refresh(task).status == Status.SCHEDULED
