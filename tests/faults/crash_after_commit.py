"""Write tasks from processes that die right after the commit.

    python -m tests.faults.crash_after_commit schedule PREFIX COUNT DELAY_MS
    python -m tests.faults.crash_after_commit apply OPERATION ...

where an OPERATION is ``cancel:TASK_ID`` or ``reschedule:TASK_ID:DELAY_MS``.

For each task the parent forks a child. The child opens a transaction, FIRST
registers ``transaction.on_commit(SIGKILL myself)`` and THEN calls
``schedule()`` (or ``cancel()``, ``reschedule()``), so on commit the kill runs
before django-delayq's own on-commit Redis write: the row is committed and
Redis never hears of it.

``schedule``: even-numbered tasks are due at once, odd-numbered ones after
DELAY_MS. Every fourth child also schedules a task in a savepoint it rolls
back, and every seventh rolls its whole transaction back (it then lives, and
exits 0).

The parent prints one JSON object per child: the key (or task id), whether
its transaction committed, and how the child ended.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from collections.abc import Callable


class Rollback(Exception):
    pass


def die_on_commit() -> None:
    from django.db import transaction

    transaction.on_commit(lambda: os.kill(os.getpid(), signal.SIGKILL))


def schedule_child(prefix: str, index: int, delay: float) -> None:
    from django.db import transaction

    from django_delayq import schedule
    from tests.testapp.tasks import record

    key = f"{prefix}-{index}"
    try:
        with transaction.atomic():
            die_on_commit()
            schedule(record, args=[key], delay=delay)
            if index % 4 == 3:
                try:
                    with transaction.atomic():
                        schedule(record, args=[f"{key}-savepoint"], delay=delay)
                        raise Rollback
                except Rollback:
                    pass
            if index % 7 == 6:
                raise Rollback
    except Rollback:
        os._exit(0)


def cancel_child(task_id: str) -> None:
    from django.db import transaction

    from django_delayq import cancel

    with transaction.atomic():
        die_on_commit()
        if not cancel(task_id):
            os._exit(5)  # not cancellable: the test fails on this


def reschedule_child(task_id: str, delay: float) -> None:
    from django.db import transaction

    from django_delayq import reschedule

    with transaction.atomic():
        die_on_commit()
        reschedule(task_id, delay=delay)


def fork(work: Callable[[], None]) -> str:
    """Run ``work`` in a child; return how the child ended."""
    from django.db import connections

    connections.close_all()  # nothing shared across the fork
    pid = os.fork()
    if pid == 0:
        try:
            work()
            os._exit(3)  # the commit did not kill us: the test fails on this
        except BaseException:
            traceback.print_exc()
        os._exit(4)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return signal.Signals(os.WTERMSIG(status)).name
    return f"exit {os.WEXITSTATUS(status)}"


def main() -> None:
    import django

    django.setup()
    # Imported once here, not in each child.
    import django_delayq.api  # noqa: F401
    import tests.testapp.tasks  # noqa: F401

    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "schedule":
        prefix, count, delay_ms = args[0], int(args[1]), int(args[2])
        for index in range(count):
            delay = delay_ms / 1000 if index % 2 else 0.0
            key = f"{prefix}-{index}"
            ended = fork(lambda i=index, d=delay: schedule_child(prefix, i, d))
            report = {
                "key": key,
                "committed": index % 7 != 6,
                "savepoint": f"{key}-savepoint" if index % 4 == 3 else None,
                "ended": ended,
            }
            print(json.dumps(report), flush=True)
    elif mode == "apply":
        for operation in args:
            name, task_id, *rest = operation.split(":")
            if name == "cancel":
                ended = fork(lambda t=task_id: cancel_child(t))
            else:
                delay = int(rest[0]) / 1000
                ended = fork(lambda t=task_id, d=delay: reschedule_child(t, d))
            print(json.dumps({"id": task_id, "ended": ended}), flush=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
