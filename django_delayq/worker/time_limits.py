"""Time limits, and what each thread of a worker is running right now.

A :class:`Watchdog` knows, for every thread of one worker process, the task
whose function it is running and every task it holds claimed (its group and
the rest of its batch). The worker's main thread calls :meth:`Watchdog.check`
a few times a second:

1. a task past its time limit is *interrupted*: :class:`TimeLimitExceeded`
   is raised in its thread, at the next Python instruction. Its attempt then
   fails like any error (its savepoint or transaction is rolled back) and
   the retry policy applies;
2. a task still running a grace period later is *stuck* in code that cannot
   be interrupted (a C call, a socket read without a timeout). Nothing can
   stop a thread from outside, so the worker gives up on the process: it
   records the attempt as failed, hands the other tasks the thread held back
   uncounted (:func:`django_delayq.transitions.hand_back`), lets its other
   threads finish, and exits so that a fresh process replaces it (its
   database session closes, which rolls the stuck transaction back).

A task cancelled while it runs (:func:`django_delayq.cancel`) is stopped
the same way, from its row: once a second, while any of its threads runs a
task, the worker's main thread asks the database which of those rows are
``cancelled`` now (:meth:`Watchdog.look_for_cancels`, one indexed query by
primary key; none while nothing runs). A run found cancelled sees
:attr:`Running.cancelled` set at once, which its code can check
(:func:`django_delayq.raise_if_cancelled`); ``DELAYQ["CANCEL_GRACE"]``
seconds later it is interrupted with :class:`TaskCancelled` as in step 1,
and a grace period after that it is stuck as in step 2. The row is the
source of truth, so this needs no Redis, and a cancel committed while Redis
is down still reaches the worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError

from ..conf import get_settings
from ..db.connections import recycle_connections
from ..exceptions import TaskCancelled, TimeLimitExceeded
from ..models import DelayedTask, Status, write_db
from .board import Board

logger = logging.getLogger(__name__)

#: How long an interrupted task may take to unwind before its thread is
#: declared stuck.
DEFAULT_GRACE = 5.0


@dataclass
class Running:
    """One thread's task in progress."""

    row: DelayedTask
    limit: float | None
    deadline: float
    interrupted_at: float | None = None
    #: what was raised in the thread: a time limit's or a cancel's exception
    interruption: type[BaseException] = TimeLimitExceeded
    #: set once the worker found the task cancelled (read by the task's
    #: cooperative checks, from any thread)
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: when the task is stopped by force for its cancel (time.monotonic())
    cancel_deadline: float = float("inf")

    def due(self) -> float:
        """When this run is to be interrupted: its limit or its cancel."""
        return min(self.deadline, self.cancel_deadline)


@dataclass
class Stuck:
    """A task that could not be interrupted, and what its thread held."""

    thread_id: int
    row: DelayedTask
    #: its time limit (None: it was stopped because it was cancelled)
    limit: float | None
    held: list[DelayedTask] = field(default_factory=list)


class Watchdog:
    """Tracks and enforces time limits for the threads of one worker process."""

    def __init__(self, grace: float = DEFAULT_GRACE) -> None:
        self.grace = grace
        #: where a supervised worker process shows what it runs (see
        #: :mod:`django_delayq.worker.board`); None when nobody watches
        self.board: Board | None = None
        self._lock = threading.Lock()
        self._running: dict[int, Running] = {}
        #: thread -> task id -> claimed row not finished yet
        self._held: dict[int, dict[object, DelayedTask]] = {}
        #: threads whose stuck task the worker gave up on
        self._abandoned: set[int] = set()
        #: thread -> how long its last function ran, in seconds
        self._durations: dict[int, float] = {}
        #: claimed rows found cancelled before their function started
        self._cancelled: set[object] = set()

    def hold(self, rows: Iterable[DelayedTask]) -> None:
        """Note rows the calling thread has claimed."""
        with self._lock:
            held = self._held.setdefault(threading.get_ident(), {})
            for row in rows:
                held[row.pk] = row

    def drop(self, rows: Iterable[DelayedTask]) -> None:
        """Note rows the calling thread is done with."""
        with self._lock:
            held = self._held.get(threading.get_ident())
            if held is not None:
                for row in rows:
                    held.pop(row.pk, None)
                    self._cancelled.discard(row.pk)

    @contextlib.contextmanager
    def running(self, row: DelayedTask, limit: float | None) -> Iterator[Running]:
        """Around a task's function: the calling thread runs ``row`` for at
        most ``limit`` seconds (None: no limit)."""
        ident = threading.get_ident()
        deadline = time.monotonic() + limit if limit is not None else float("inf")
        running = Running(row, limit, deadline)
        with self._lock:
            self._running[ident] = running
        board = self.board
        if board is not None:
            board.started(row.pk, deadline, limit)
        began = time.monotonic()
        try:
            yield running
        finally:
            # Under the lock, so that no interruption is raised once the
            # function has returned and this thread has left the block.
            with self._lock:
                del self._running[ident]
                self._durations[ident] = time.monotonic() - began
            if board is not None:
                board.finished()

    def cancelled_before_start(self, row: DelayedTask) -> bool:
        """Whether ``row``, claimed by the calling thread but not started
        yet, was found cancelled meanwhile: its function must not start."""
        with self._lock:
            return row.pk in self._cancelled

    def last_duration(self) -> float | None:
        """How long the calling thread's last function ran (once)."""
        with self._lock:
            return self._durations.pop(threading.get_ident(), None)

    def look_for_cancels(self) -> None:
        """Mark the runs (and the claimed rows waiting to run) whose rows were
        cancelled meanwhile: one query, none while this process holds no
        claimed row. A database error is logged: the next look tries again."""
        with self._lock:
            ids: set[Any] = {
                r.row.pk for r in self._running.values() if not r.cancelled.is_set()
            }
            ids.update(
                pk
                for held in self._held.values()
                for pk in held
                if pk not in self._cancelled
            )
        if not ids:
            return
        recycle_connections()
        try:
            found = set(
                DelayedTask.objects.using(write_db())
                .filter(pk__in=ids, status=Status.CANCELLED)
                .values_list("pk", flat=True)
            )
        except DatabaseError as exc:
            logger.warning("could not look for cancelled tasks: %s", exc)
            return
        if found:
            self.cancelled(found)

    def cancelled(self, task_ids: Iterable[object]) -> None:
        """Mark the runs of ``task_ids`` cancelled: their code may see it now,
        and they are interrupted ``DELAYQ["CANCEL_GRACE"]`` seconds later."""
        ids = set(task_ids)
        force_at = time.monotonic() + get_settings().cancel_grace
        with self._lock:
            self._cancelled.update(
                pk for held in self._held.values() for pk in held if pk in ids
            )
            for running in self._running.values():
                if running.row.pk in ids and not running.cancelled.is_set():
                    running.cancel_deadline = force_at
                    running.cancelled.set()
                    logger.info(
                        "task %s (%s) was cancelled while running; it is "
                        "stopped by force in %g s unless it returns first",
                        running.row.pk,
                        running.row.name,
                        get_settings().cancel_grace,
                    )

    def check(self) -> list[Stuck]:
        """Interrupt the tasks past their limit or their cancel's grace
        period; return those stuck."""
        now = time.monotonic()
        stuck = []
        with self._lock:
            for ident, running in self._running.items():
                if now < running.due():
                    continue
                if running.interrupted_at is None:
                    running.interrupted_at = now
                    if now >= running.cancel_deadline:
                        running.interruption = TaskCancelled
                    _raise_in(ident, running.interruption)
                elif now >= running.interrupted_at + self.grace:
                    held = [
                        row
                        for pk, row in self._held.get(ident, {}).items()
                        if pk != running.row.pk
                    ]
                    limit = (
                        None if running.interruption is TaskCancelled else running.limit
                    )
                    stuck.append(Stuck(ident, running.row, limit, held))
                    self._abandoned.add(ident)
                    if self.board is not None:
                        # Settled by the worker (see stuck.py): not for the
                        # supervisor to enforce again.
                        self.board.finished(ident)
        return stuck

    def check_not_abandoned(self) -> None:
        """Raise :class:`Abandoned` in a thread the worker gave up on."""
        if self._abandoned and threading.get_ident() in self._abandoned:
            raise Abandoned("this thread's tasks were handed back")


class Abandoned(Exception):
    """Raised in a thread the worker gave up on, should its task ever return:
    what it held was handed back, so it must run nothing more."""


#: Used where no worker enforces limits (a task run from a test, say).
NO_WATCHDOG = Watchdog()


def _raise_in(thread_id: int, exc: type[BaseException]) -> None:
    """Raise ``exc`` in the thread ``thread_id`` at its next instruction."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc)
    )


def time_limit_error(limit: float) -> str:
    return f"TimeLimitExceeded: the task ran longer than its time limit of {limit:g} s"
