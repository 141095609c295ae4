"""Giving up on a task that ran past its time limit (or was cancelled) and
could not be stopped.

Called from a worker's main thread while the stuck thread is still inside
the task (see :mod:`django_delayq.worker.time_limits`). The stuck attempt fails (and
is retried if attempts are left), the other tasks that thread held claimed
go back to their due-sets without losing an attempt, and all their stream
entries are acknowledged: the process is about to exit, and nothing it held
should wait for a visibility timeout.
"""

from __future__ import annotations

import copy
import logging
import threading

from django.db import connections, transaction

from .. import transitions
from ..conf import get_settings
from ..exceptions import TimeLimitExceeded
from ..models import DelayedTask, OutboxEntry, write_db
from ..outbox import index_after_commit
from ..outcomes import record_failure, registered_task
from ..store import streams
from ..store.connection import Client
from ..store.keys import shard_keys
from .time_limits import Stuck, time_limit_error

logger = logging.getLogger(__name__)

#: The most a worker waits for the bookkeeping below before it exits anyway
#: (a row the stuck transaction locked would block it until then).
GIVE_UP_TIMEOUT = 10.0


def give_up(client: Client, worker: str, stuck: Stuck) -> None:
    """Record the stuck attempt's failure and hand its thread's other tasks
    back, in a thread of its own, waiting at most :data:`GIVE_UP_TIMEOUT`."""
    if stuck.limit is None:
        logger.critical(
            "worker %s: task %s (%s) was cancelled while running and could not "
            "be interrupted; handing back %d other task(s), and replacing this "
            "process",
            worker,
            stuck.row.pk,
            stuck.row.name,
            len(stuck.held),
        )
    else:
        logger.critical(
            "worker %s: task %s (%s) ran past its time limit of %g s and could "
            "not be interrupted; failing its attempt, handing back %d other "
            "task(s), and replacing this process",
            worker,
            stuck.row.pk,
            stuck.row.name,
            stuck.limit,
            len(stuck.held),
        )
    helper = threading.Thread(
        target=_settle, args=(client, stuck), name="delayq-give-up", daemon=True
    )
    helper.start()
    helper.join(GIVE_UP_TIMEOUT)
    if helper.is_alive():
        logger.error(
            "worker %s: gave up waiting to record the stuck task's outcome; "
            "the tasks left running are recovered after the visibility timeout",
            worker,
        )


def _settle(client: Client, stuck: Stuck) -> None:
    db = write_db()
    try:
        # A copy: the stuck thread still holds (and may yet touch) the row.
        row = copy.copy(stuck.row)
        if stuck.limit is not None:
            error = f"{time_limit_error(stuck.limit)}, and could not be interrupted"
            record_failure(
                row,
                TimeLimitExceeded(),
                error=error,
                trace="",
                task=registered_task(row),
                raised=False,
            )
        # Else it was cancelled: its row says so already, and nothing of the
        # attempt is recorded.
        with transaction.atomic(using=db):
            handed = transitions.hand_back([copy.copy(r) for r in stuck.held], db)
            index_after_commit(handed, OutboxEntry.Action.RESCHEDULE, db)
        streams.finish_many(client, [_entry(r) for r in [stuck.row, *stuck.held]])
    except Exception:
        logger.exception("could not settle the tasks of a stuck thread")
    finally:
        connections.close_all()


def _entry(row: DelayedTask) -> streams.Entry:
    keys = shard_keys(get_settings().key_prefix, row.queue, row.shard)
    ready = keys.ready_of(row.priority)
    return streams.Entry(ready, transitions.delivery_of(row.claim_entry).encode(), {})
