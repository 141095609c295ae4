"""Handing back at once what a worker process held when it died.

A worker process that dies (a task called ``os._exit()``, crashed in C code
or was killed by the out-of-memory killer; or the supervisor killed it at
the end of a grace period) leaves its stream entries pending and the rows it
claimed ``running``. Left alone, they wait for the visibility timeout
before another worker takes them over. A supervisor knows at once that the
process died and, from its :mod:`~django_delayq.worker.board`, which tasks'
functions were running in it, so it sorts the rest out right away, in a
short-lived process of its own (:func:`rescue_main`):

- a task whose function was running is the one that took the process down:
  its attempt is charged as failed ("worker lost"), and it is retried with
  backoff or, after its last attempt, failed. If several threads were each
  running one, nothing tells which of them did it: those are left to the
  visibility timeout, after which each is taken over and run again alone
  (see :mod:`django_delayq.transitions`), which finds the culprit;
- every other task it had claimed (its group, the rest of its batch) goes
  back to its due-set with the attempt not counted
  (:func:`~django_delayq.transitions.hand_back`);
- entries it had read but not claimed are put back in the stream for any
  worker; entries whose task has finished, or belongs to another delivery,
  are acknowledged.

When the supervisor itself killed the process, it says whom to blame
(:class:`Blame`): nobody when a graceful stop's grace period ran out (the
running tasks are handed back uncounted too), and the task that overran its
time limit when it killed a process whose own watchdog could not act.

Every step is fenced like any state change, so a worker that took an entry
over meanwhile wins, and a rescue cut short (the database or Redis down) is
finished by the visibility timeout as before.
"""

from __future__ import annotations

import logging
import signal
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from django.db import DatabaseError, connections, transaction

from .. import transitions
from ..exceptions import RedisUnavailable
from ..models import DelayedTask, OutboxEntry, Status, write_db
from ..outbox import index_after_commit
from ..outcomes import Verdict, record_failure, registered_task, worker_lost
from ..store import streams
from ..store.connection import Client, get_client
from ..store.errors import error_text
from ..worker import Worker
from ..worker.board import Snapshot

logger = logging.getLogger(__name__)

#: The most a rescue may take before it gives up (the visibility timeout
#: then finishes its work): a row locked by the dead process's session until
#: the database notices it is gone would otherwise hold it up.
RESCUE_TIMEOUT = 30


@dataclass(frozen=True)
class Blame:
    """Whom a rescue charges an attempt for the death of a process."""

    #: the task that was running, if it was the only one (the process died
    #: by itself, and that task is the one thing it was doing)
    running: bool = True
    #: tasks the supervisor killed the process for, with the error to record
    culprits: Mapping[uuid.UUID, str] = field(default_factory=dict)


#: The supervisor killed the process to stop it: no task is to blame.
NOBODY = Blame(running=False)


@dataclass
class Rescued:
    """What a rescue did with the entries of a dead worker."""

    handed_back: list[uuid.UUID] = field(default_factory=list)
    charged: dict[uuid.UUID, Verdict] = field(default_factory=dict)
    #: running when several were: left to the visibility timeout
    left: list[uuid.UUID] = field(default_factory=list)
    requeued: int = 0
    acknowledged: int = 0


def rescue(
    client: Client,
    stream_names: Sequence[str],
    board: Snapshot,
    *,
    blame: Blame,
    cause: str,
) -> Rescued:
    """Sort out what the dead worker ``board.worker`` held (see above).

    :param cause: how the process ended ("was killed by SIGKILL"), for the
        error recorded when the running task is charged.
    """
    done = Rescued()
    if not board.worker:
        return done  # it died before it read anything
    rescuer = f"{board.worker}-rescue"
    entries = [
        entry
        for stream in stream_names
        for entry in streams.take_over(client, stream, f"{board.worker}-", rescuer)
    ]
    if not entries:
        return done
    db = write_db()
    ids = {entry.task_id for entry in entries if entry.task_id is not None}
    rows = {row.pk: row for row in DelayedTask.objects.using(db).filter(pk__in=ids)}

    held: dict[uuid.UUID, streams.Entry] = {}
    running: dict[uuid.UUID, streams.Entry] = {}
    requeue: list[streams.Entry] = []
    finished: list[streams.Entry] = []
    for entry in entries:
        row = rows.get(entry.task_id) if entry.task_id is not None else None
        if row is None or row.status == Status.SCHEDULED:
            # Read, never claimed (or not a task: a worker dead-letters it).
            requeue.append(entry)
        elif row.status == Status.RUNNING and (
            transitions.delivery_of(row.claim_entry) == entry.entry_id.decode()
        ):
            (running if row.pk in board.running else held)[row.pk] = entry
        else:
            finished.append(entry)  # finished, or another delivery's attempt

    # Whom to charge (see Blame); whoever else was running is not to blame.
    errors: dict[uuid.UUID, str] = {}
    if blame.culprits:
        errors = {pk: blame.culprits[pk] for pk in running if pk in blame.culprits}
    elif blame.running and len(running) == 1:
        errors = {pk: _worker_lost(rows[pk], cause) for pk in running}
    elif blame.running and running:
        # Nothing tells which of them did it: see the module docstring.
        done.left, running = list(running), {}
    charged = {pk: running.pop(pk) for pk in errors}
    held.update(running)

    with transaction.atomic(using=db):
        handed = transitions.hand_back([rows[pk] for pk in held], db)
        index_after_commit(handed, OutboxEntry.Action.RESCHEDULE, db)
    done.handed_back = [row.pk for row in handed]
    for pk, error in errors.items():
        done.charged[pk] = record_failure(
            rows[pk],
            RuntimeError(error),
            error=error,
            trace="",
            task=registered_task(rows[pk]),
            raised=False,
        )
    # A row not handed back was taken over meanwhile: the entry is stale.
    settled = [*held.values(), *charged.values(), *finished]
    if requeue:
        streams.requeue(client, requeue)
    if settled:
        streams.finish_many(client, settled)
    streams.remove_idle_consumers(client, stream_names, [rescuer])
    done.requeued, done.acknowledged = len(requeue), len(settled)
    return done


def rescue_main(
    make_worker: Callable[[], Worker],
    board: Snapshot,
    pid: int,
    blame: Blame,
    cause: str,
) -> None:
    """A rescue process's body, forked by the supervisor (see above)."""
    # An interrupted rescue is finished by the visibility timeout; one that
    # hangs must not keep the supervisor from stopping.
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(RESCUE_TIMEOUT)
    # A Ctrl-C reaches the whole process group: this short job finishes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        done = rescue(
            get_client("loop"),
            make_worker().streams,
            board,
            blame=blame,
            cause=cause,
        )
    except (RedisUnavailable, DatabaseError) as exc:
        logger.warning(
            "delayq_worker: could not hand back what worker process %d held "
            "(%s); other workers take it over after the visibility timeout",
            pid,
            error_text(exc),
        )
        raise SystemExit(1) from None
    finally:
        connections.close_all()
    _log(pid, cause, done)


def _worker_lost(row: DelayedTask, cause: str) -> str:
    return worker_lost(row, f": its process {cause} while running this task")


def _log(pid: int, cause: str, done: Rescued) -> None:
    if not (done.handed_back or done.charged or done.left or done.requeued):
        return
    parts = [f"handed back {len(done.handed_back)} claimed task(s) uncounted"]
    if done.requeued:
        parts.append(f"requeued {done.requeued} unclaimed entries")
    for pk, verdict in done.charged.items():
        what = {
            Verdict.RETRYING: "will be retried",
            Verdict.FAILED: "failed after its last attempt",
            Verdict.FENCED: "was taken over by another worker",
        }[verdict]
        parts.append(f"charged task {pk}, which was running, an attempt (it {what})")
    if done.left:
        parts.append(
            f"left {len(done.left)} task(s) that were running side by side to "
            f"be taken over one by one after the visibility timeout"
        )
    logger.warning(
        "delayq_worker: worker process %d %s: %s", pid, cause, "; ".join(parts)
    )
