"""What a supervisor does at once with the work of a worker process that died:
the task that was running is charged, everything else it held is handed back
uncounted, and nothing waits for the visibility timeout.

The dead worker is played here by a consumer that read and claimed entries
and then did nothing more, as a killed process leaves them."""

from __future__ import annotations

import math
import threading

import pytest
from django.utils import timezone

from django_delayq import schedule, transitions
from django_delayq.dispatcher import Dispatcher
from django_delayq.models import DelayedTask, Status
from django_delayq.outcomes import Verdict
from django_delayq.store import streams
from django_delayq.store.keys import encode_member, shard_keys
from django_delayq.supervisor.rescue import NOBODY, Blame, Rescued, rescue
from django_delayq.worker.board import Board
from tests.support.helpers import drain, due_members, refresh
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)

READY = shard_keys("delayq", "default", 0).ready
WORKER = "deadhost:4242:abc123"


def _dead_worker(redis_client, tasks: int, claimed: int) -> list[DelayedTask]:
    """Schedule ``tasks``, read them all as the dead worker's thread, and
    claim the first ``claimed`` in one batch; the rest stay unclaimed."""
    rows = [schedule(add, args=[i, i]) for i in range(tasks)]
    Dispatcher().run(once=True)
    streams.ensure_groups(redis_client, [READY])
    entries = streams.read(
        redis_client, f"{WORKER}-0", [READY], count=100, block_ms=None
    )
    assert len(entries) == tasks
    transitions.claim_due(
        [(e.task_id, e.entry_id.decode()) for e in entries[:claimed]],
        timezone.now(),
        f"{WORKER}-0",
        "default",
    )
    by_id = {row.pk: row for row in rows}
    return [by_id[e.task_id] for e in entries]


def _board(*running: DelayedTask) -> Board:
    """The dead worker's board: each task was running in a thread of its own."""
    board = Board()
    board.announce(WORKER)
    # Alive together, as a worker's threads are: a thread that ended may
    # pass its identity on to the next one.
    together = threading.Barrier(len(running) + 1)

    def run(row: DelayedTask) -> None:
        board.started(row.pk, math.inf, None)
        together.wait()

    threads = [threading.Thread(target=run, args=(row,)) for row in running]
    for thread in threads:
        thread.start()
    together.wait()
    for thread in threads:
        thread.join()
    return board


def _pending(redis_client) -> int:
    return redis_client.xpending(READY, streams.GROUP)["pending"]


def _consumers(redis_client) -> list[str]:
    consumers = redis_client.xinfo_consumers(READY, streams.GROUP)
    return [c["name"].decode() for c in consumers]


def test_the_running_task_is_charged_and_the_rest_handed_back_uncounted(
    redis_client,
) -> None:
    culprit, *neighbours, unclaimed = _dead_worker(redis_client, 5, claimed=4)

    done = rescue(
        redis_client,
        [READY],
        _board(culprit).read(),
        blame=Blame(),
        cause="was killed by SIGKILL",
    )

    assert done.charged == {culprit.pk: Verdict.RETRYING}
    assert sorted(done.handed_back) == sorted(row.pk for row in neighbours)
    assert done.requeued == 1
    row = refresh(culprit)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert row.last_error == (
        "worker lost during attempt 1 of 3: its process was killed by SIGKILL "
        "while running this task"
    )
    for neighbour in neighbours:
        row = refresh(neighbour)
        assert (row.status, row.attempts) == (Status.SCHEDULED, 0)
        assert row.last_error == ""
    # Back in the due-set (the culprit after its backoff), nothing pending,
    # and the dead worker's consumer is gone from the group.
    indexed = due_members(redis_client)
    assert {culprit.pk, *(row.pk for row in neighbours)} <= set(indexed)
    assert _pending(redis_client) == 0
    assert _consumers(redis_client) == []
    [[_, fresh]] = redis_client.xread({READY: "0-0"})
    assert [fields[b"id"] for _, fields in fresh] == [encode_member(unclaimed.pk)]

    drain()
    for neighbour in [*neighbours, unclaimed]:
        row = refresh(neighbour)
        assert (row.status, row.attempts, row.result) == (
            Status.SUCCEEDED,
            1,
            neighbour.args[0] * 2,
        )


def test_a_task_that_kills_its_process_on_its_last_attempt_fails(
    redis_client,
) -> None:
    [culprit] = _dead_worker(redis_client, 1, claimed=1)
    DelayedTask.objects.filter(pk=culprit.pk).update(max_attempts=1)

    done = rescue(
        redis_client,
        [READY],
        _board(culprit).read(),
        blame=Blame(),
        cause="exited with status 1",
    )

    assert done.charged == {culprit.pk: Verdict.FAILED}
    row = refresh(culprit)
    assert (row.status, row.attempts) == (Status.FAILED, 1)
    assert row.last_error == (
        "worker lost during attempt 1 of 1: its process exited with status 1 "
        "while running this task"
    )
    assert culprit.pk not in due_members(redis_client)
    assert _pending(redis_client) == 0


def test_a_process_killed_from_outside_charges_no_task(redis_client) -> None:
    running, *claimed = _dead_worker(redis_client, 3, claimed=3)

    done = rescue(
        redis_client,
        [READY],
        _board(running).read(),
        blame=NOBODY,
        cause="was killed by SIGKILL",
    )

    assert done.charged == {}
    assert len(done.handed_back) == 3
    for task in [running, *claimed]:
        row = refresh(task)
        assert (row.status, row.attempts, row.last_error) == (Status.SCHEDULED, 0, "")
    assert _pending(redis_client) == 0


def test_tasks_running_side_by_side_are_left_to_run_again_alone(
    redis_client,
) -> None:
    """Two threads were each running a task: nothing tells which one killed
    the process, so neither is charged now; both stay pending for the
    visibility timeout, after which each runs alone, uncounted."""
    first, second, other = _dead_worker(redis_client, 3, claimed=3)

    done = rescue(
        redis_client,
        [READY],
        _board(first, second).read(),
        blame=Blame(),
        cause="was killed by SIGSEGV",
    )

    assert done.charged == {}
    assert sorted(done.left) == sorted([first.pk, second.pk])
    assert done.handed_back == [other.pk]
    for task in (first, second):
        assert refresh(task).status == Status.RUNNING
    assert _pending(redis_client) == 2
    assert _consumers(redis_client) == [f"{WORKER}-rescue"]

    # Past the visibility timeout, a worker takes each over alone.
    redis_client.xclaim(
        READY,
        streams.GROUP,
        f"{WORKER}-rescue",
        0,
        [
            p["message_id"]
            for p in redis_client.xpending_range(READY, streams.GROUP, "-", "+", 10)
        ],
        idle=10**9,
    )
    drain()
    for task in (first, second, other):
        row = refresh(task)
        assert (row.status, row.attempts) == (Status.SUCCEEDED, 1)


def test_entries_whose_task_finished_are_only_acknowledged(redis_client) -> None:
    """The group had committed when the process died, before its entries
    were acknowledged: nothing is handed back or run again."""
    first, second = _dead_worker(redis_client, 2, claimed=2)
    DelayedTask.objects.filter(pk__in=[first.pk, second.pk]).update(
        status=Status.SUCCEEDED, finished_at=timezone.now()
    )

    done = rescue(
        redis_client,
        [READY],
        _board(first).read(),
        blame=Blame(),
        cause="was killed by SIGKILL",
    )

    assert (done.handed_back, done.charged, done.acknowledged) == ([], {}, 2)
    assert refresh(first).status == Status.SUCCEEDED
    assert _pending(redis_client) == 0
    assert redis_client.xlen(READY) == 0
    assert due_members(redis_client) == {}


def test_a_board_without_a_worker_name_touches_nothing(redis_client) -> None:
    """The process died before its worker started: it read nothing, and no
    other worker's entries are taken."""
    [task] = _dead_worker(redis_client, 1, claimed=1)

    done = rescue(redis_client, [READY], Board().read(), blame=Blame(), cause="")

    assert done == Rescued()
    assert refresh(task).status == Status.RUNNING
    assert _pending(redis_client) == 1


def test_a_task_killed_for_its_time_limit_is_charged_and_no_other(
    redis_client,
) -> None:
    """The supervisor killed the process because one task overran its time
    limit where the worker could not stop it: that task is charged with the
    time limit error, the one running beside it is handed back uncounted."""
    overran, beside, other = _dead_worker(redis_client, 3, claimed=3)
    error = "TimeLimitExceeded: the task ran longer than its time limit of 2 s"

    done = rescue(
        redis_client,
        [READY],
        _board(overran, beside).read(),
        blame=Blame(running=False, culprits={overran.pk: error}),
        cause="was killed by SIGKILL",
    )

    assert done.charged == {overran.pk: Verdict.RETRYING}
    assert sorted(done.handed_back) == sorted([beside.pk, other.pk])
    row = refresh(overran)
    assert (row.status, row.attempts, row.last_error) == (
        Status.SCHEDULED,
        1,
        error,
    )
    assert (refresh(beside).status, refresh(beside).attempts) == (Status.SCHEDULED, 0)
    assert _pending(redis_client) == 0
