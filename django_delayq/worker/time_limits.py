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
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ..exceptions import TimeLimitExceeded
from ..models import DelayedTask
from .board import Board

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


@dataclass
class Stuck:
    """A task that could not be interrupted, and what its thread held."""

    thread_id: int
    row: DelayedTask
    limit: float
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

    @contextlib.contextmanager
    def running(self, row: DelayedTask, limit: float | None) -> Iterator[None]:
        """Around a task's function: the calling thread runs ``row`` for at
        most ``limit`` seconds (None: no limit)."""
        ident = threading.get_ident()
        deadline = time.monotonic() + limit if limit is not None else float("inf")
        with self._lock:
            self._running[ident] = Running(row, limit, deadline)
        board = self.board
        if board is not None:
            board.started(row.pk, deadline, limit)
        began = time.monotonic()
        try:
            yield
        finally:
            # Under the lock, so that no interruption is raised once the
            # function has returned and this thread has left the block.
            with self._lock:
                del self._running[ident]
                self._durations[ident] = time.monotonic() - began
            if board is not None:
                board.finished()

    def last_duration(self) -> float | None:
        """How long the calling thread's last function ran (once)."""
        with self._lock:
            return self._durations.pop(threading.get_ident(), None)

    def check(self) -> list[Stuck]:
        """Interrupt the tasks past their limit; return those stuck."""
        now = time.monotonic()
        stuck = []
        with self._lock:
            for ident, running in self._running.items():
                if running.limit is None or now < running.deadline:
                    continue
                if running.interrupted_at is None:
                    running.interrupted_at = now
                    _raise_in(ident, TimeLimitExceeded)
                elif now >= running.interrupted_at + self.grace:
                    held = [
                        row
                        for pk, row in self._held.get(ident, {}).items()
                        if pk != running.row.pk
                    ]
                    stuck.append(Stuck(ident, running.row, running.limit, held))
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
