"""delayq_worker --processes N as a real process tree: a supervisor runs the
tasks in N worker processes, replaces those that die or are recycled, stops
them gracefully, and leaves no orphan behind."""

from __future__ import annotations

import datetime
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import redis
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_delayq import schedule
from django_delayq.models import DelayedTask, Status
from django_delayq.store.keys import shard_keys
from tests.acceptance.processes import ROOT, Processes
from tests.testapp.models import Ledger
from tests.testapp.tasks import kills_its_process, record
from tools.procs import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

STARTED = re.compile(r"supervisor (\d+) started (\d+) worker process\(es\): ([\d, ]+)")
REPLACED = re.compile(r"started worker process (\d+)")


def children(processes: Processes, supervisor: subprocess.Popen[bytes]) -> list[int]:
    """The worker processes the supervisor says it started."""
    wait_for(
        lambda: STARTED.search(processes.log(supervisor)) is not None,
        30,
        "the supervisor's start line",
    )
    match = STARTED.search(processes.log(supervisor))
    assert match is not None
    assert int(match[1]) == supervisor.pid
    return [int(pid) for pid in match[3].split(", ")]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, not yet reaped by init, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def ready_stream(row: DelayedTask) -> str:
    return shard_keys("delayq", row.queue, row.shard).ready


def succeeded() -> int:
    return DelayedTask.objects.filter(status=Status.SUCCEEDED).count()


def test_two_processes_run_the_tasks_in_two_children(
    processes: Processes, redis_client: redis.Redis
) -> None:
    processes.start("delayq_dispatch")
    supervisor = processes.start("delayq_worker", "--processes", "2")
    pids = children(processes, supervisor)
    assert len(set(pids)) == 2
    assert supervisor.pid not in pids
    assert all(alive(pid) and parent_of(pid) == supervisor.pid for pid in pids)

    tasks = [schedule(record, args=[f"task-{i}"]) for i in range(20)]
    wait_for(lambda: succeeded() == len(tasks), 30, "all 20 tasks succeeded")
    assert Ledger.objects.count() == 20
    # The supervisor runs no task itself.
    assert set(Ledger.objects.values_list("pid", flat=True)) <= set(pids)


def test_a_killed_child_is_replaced_and_tasks_still_run(
    processes: Processes, redis_client: redis.Redis
) -> None:
    processes.start("delayq_dispatch")
    supervisor = processes.start("delayq_worker", "--processes", "2")
    first, second = children(processes, supervisor)

    os.kill(first, signal.SIGKILL)
    wait_for(
        lambda: REPLACED.search(processes.log(supervisor)) is not None,
        15,
        "a replacement",
    )
    log = processes.log(supervisor)
    assert f"worker process {first} was killed by SIGKILL" in log
    [replacement] = [int(pid) for pid in REPLACED.findall(log)]
    assert replacement not in (first, second)
    assert alive(replacement)
    assert parent_of(replacement) == supervisor.pid
    assert alive(second)

    tasks = [schedule(record, args=[f"after-{i}"]) for i in range(10)]
    wait_for(lambda: succeeded() == len(tasks), 30, "the tasks ran after the kill")
    assert set(Ledger.objects.values_list("pid", flat=True)) <= {second, replacement}


def test_sigterm_lets_the_tasks_in_flight_finish_and_every_process_exit_0(
    processes: Processes, redis_client: redis.Redis
) -> None:
    processes.start("delayq_dispatch")
    supervisor = processes.start(
        "delayq_worker", "--processes", "2", "--grace-period", "20"
    )
    pids = children(processes, supervisor)
    task = schedule(record, args=["slow"], kwargs={"seconds": 2.0})
    wait_for(lambda: DelayedTask.objects.get(pk=task.pk).status == "running", 30, "")

    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=20) == 0
    assert DelayedTask.objects.get(pk=task.pk).status == Status.SUCCEEDED
    assert Ledger.objects.filter(key="slow").count() == 1
    assert not any(alive(pid) for pid in pids)
    log = processes.log(supervisor)
    assert "stopping 2 worker process(es), grace period 20 s" in log
    assert f"supervisor {supervisor.pid} stopped" in log
    assert "delayq_worker: 1 processed, 0 dead-lettered, 0 reclaimed" in log


def test_the_grace_period_ends_a_graceful_stop_with_sigkill(
    processes: Processes, redis_client: redis.Redis
) -> None:
    processes.start("delayq_dispatch")
    supervisor = processes.start(
        "delayq_worker", "--processes", "2", "--grace-period", "1"
    )
    pids = children(processes, supervisor)
    task = schedule(record, args=["too-slow"], kwargs={"seconds": 30.0})
    wait_for(lambda: DelayedTask.objects.get(pk=task.pk).status == "running", 30, "")

    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=10) == 1
    assert not any(alive(pid) for pid in pids)
    log = processes.log(supervisor)
    assert "still running after the grace period of 1 s" in log
    # Abandoned: rolled back, and handed back at once without costing the
    # task an attempt (it was stopped, it did not fail).
    assert not Ledger.objects.filter(key="too-slow").exists()
    row = DelayedTask.objects.get(pk=task.pk)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 0)
    assert "handed back 1 claimed task(s) uncounted" in log
    assert not redis_client.xpending(ready_stream(row), "workers")["pending"]


def test_a_task_that_kills_its_process_costs_its_neighbours_nothing(
    processes: Processes, redis_client: redis.Redis
) -> None:
    """The process dies inside a group: the supervisor charges the task it
    was running an attempt and hands the others back uncounted, at once
    (the visibility timeout is 300 s here)."""
    processes.start("delayq_dispatch")
    # A grace period makes a supervisor even of one worker process.
    supervisor = processes.start(
        "delayq_worker", "--processes", "1", "--grace-period", "10"
    )
    children(processes, supervisor)
    eta = timezone.now() + datetime.timedelta(seconds=1)
    neighbours = [schedule(record, args=[f"n-{i}"], eta=eta) for i in range(8)]
    culprit = schedule(kills_its_process, args=["boom"], eta=eta)

    wait_for(lambda: succeeded() == len(neighbours), 40, "the neighbours ran")
    wait_for(
        lambda: DelayedTask.objects.get(pk=culprit.pk).status == Status.FAILED,
        40,
        "the culprit failed after its two attempts",
    )
    rows = DelayedTask.objects.filter(pk__in=[t.pk for t in neighbours])
    assert {(r.status, r.attempts) for r in rows} == {(Status.SUCCEEDED, 1)}
    runs = Counter(Ledger.objects.values_list("key", flat=True))
    assert runs == {f"n-{i}": 1 for i in range(8)}
    row = DelayedTask.objects.get(pk=culprit.pk)
    assert row.attempts == 2
    assert row.last_error == (
        "worker lost during attempt 2 of 2: its process exited with status 1 "
        "while running this task"
    )
    # The row fails in the rescue process, which logs only after its writes;
    # the supervisor logs the second death just after forking that rescue.
    charged = f"charged task {culprit.pk}, which was running, an attempt"
    wait_for(
        lambda: (
            processes.log(supervisor).count("exited with status 1 after") >= 2
            and charged in processes.log(supervisor)
        ),
        20,
        "both deaths and the charge logged",
    )
    log = processes.log(supervisor)
    assert log.count("exited with status 1 after") == 2
    assert charged in log


def test_a_second_sigterm_kills_the_children_at_once(
    processes: Processes, redis_client: redis.Redis
) -> None:
    processes.start("delayq_dispatch")
    supervisor = processes.start("delayq_worker", "--processes", "2")
    pids = children(processes, supervisor)
    task = schedule(record, args=["abandoned"], kwargs={"seconds": 30.0})
    wait_for(lambda: DelayedTask.objects.get(pk=task.pk).status == "running", 30, "")

    supervisor.send_signal(signal.SIGTERM)
    wait_for(
        lambda: "finishing what is in flight" in processes.log(supervisor),
        10,
        "the first SIGTERM was handled",
    )
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=10) == 128 + signal.SIGTERM
    wait_for(lambda: not any(alive(pid) for pid in pids), 5, "the children killed")
    assert not Ledger.objects.filter(key="abandoned").exists()
    row = DelayedTask.objects.get(pk=task.pk)
    assert (row.status, row.attempts) == (Status.RUNNING, 1)


def test_children_are_recycled_after_max_tasks_and_every_task_runs_once(
    processes: Processes, redis_client: redis.Redis
) -> None:
    processes.start("delayq_dispatch")
    supervisor = processes.start(
        "delayq_worker", "--processes", "2", "--max-tasks-per-child", "3"
    )
    first = children(processes, supervisor)
    tasks = [
        schedule(record, args=[f"task-{i}"], kwargs={"seconds": 0.2}) for i in range(10)
    ]
    wait_for(lambda: succeeded() == len(tasks), 40, "all 10 tasks succeeded")

    # At most 2 children are left unrecycled, with at most 2 tasks each, so
    # at least 2 ran 3 or more; one may still be finishing when the last task
    # succeeds.
    recycled_line = re.compile(r"worker process (\d+) recycled after (\d+) tasks")
    wait_for(
        lambda: len(recycled_line.findall(processes.log(supervisor))) >= 2,
        20,
        "two children recycled",
    )
    log = processes.log(supervisor)
    recycled = recycled_line.findall(log)
    assert all(int(count) >= 3 for _, count in recycled)
    assert {int(pid) for pid, _ in recycled} <= set(first) | {
        int(pid) for pid in REPLACED.findall(log)
    }
    assert Ledger.objects.count() == 10
    assert Ledger.objects.values("key").distinct().count() == 10
    assert DelayedTask.objects.filter(attempts__gt=1).count() == 0
    assert Ledger.objects.values("pid").distinct().count() >= 3


def test_a_child_over_its_memory_limit_is_recycled(
    processes: Processes, redis_client: redis.Redis
) -> None:
    processes.start("delayq_dispatch")
    # Any Python process is over 1 MiB: recycled after its first task.
    supervisor = processes.start("delayq_worker", "--max-memory-per-child", "1")
    [first] = children(processes, supervisor)
    tasks = [
        schedule(record, args=[f"task-{i}"], kwargs={"seconds": 0.2}) for i in range(3)
    ]
    wait_for(lambda: succeeded() == len(tasks), 30, "the tasks succeeded")
    wait_for(
        lambda: bool(
            re.search(r"recycled at \d+ MiB \(limit 1 MiB\)", processes.log(supervisor))
        ),
        15,
        "a recycle for memory",
    )
    assert f"worker process {first} recycled at" in processes.log(supervisor)


@pytest.mark.timeout(30)
def test_children_stop_by_themselves_when_the_supervisor_is_killed(
    processes: Processes, redis_client: redis.Redis
) -> None:
    supervisor = processes.start("delayq_worker", "--processes", "2")
    pids = children(processes, supervisor)
    supervisor.kill()
    supervisor.wait()
    # An idle child notices the stop within its 5 s blocking read.
    wait_for(lambda: not any(alive(pid) for pid in pids), 15, "no orphan left")


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("processes", 0, "--processes must be from 1 to 64; got 0."),
        ("processes", 65, "--processes must be from 1 to 64; got 65."),
        ("max_tasks_per_child", 0, "--max-tasks-per-child must be a positive"),
        ("max_memory_per_child", -5, "--max-memory-per-child must be a positive"),
        ("grace_period", -1.0, "--grace-period must be a number of seconds"),
        ("grace_period", float("nan"), "--grace-period must be a number of seconds"),
    ],
)
def test_a_bad_process_option_is_a_command_error(
    option: str, value: float, message: str
) -> None:
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("delayq_worker", **{option: value})


def test_once_cannot_be_supervised() -> None:
    with pytest.raises(CommandError, match="--once runs the worker in this process"):
        call_command("delayq_worker", once=True, processes=2)


def test_a_bad_process_option_stops_the_command_with_status_1(
    processes: Processes,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "django", "delayq_worker", "--processes", "0"],
        env=processes.env,
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert (
        "CommandError: --processes must be from 1 to 64; got 0." in done.stderr.decode()
    )
