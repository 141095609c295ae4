"""The worker process model: a supervisor running N worker processes.

``delayq_worker --processes N`` (or any recycling option) makes the command
process a :class:`Supervisor`. It runs no tasks and opens no connection: it
forks the worker processes, replaces those that die or are recycled, and
turns SIGTERM into a graceful stop of every child, forced after a grace
period. When a child dies, a short-lived rescue process hands back at once
what it held (:mod:`django_delayq.supervisor.rescue`), using the board the child kept
of the tasks it was running (:mod:`django_delayq.worker.board`). The same board
lets the supervisor enforce time limits where a child cannot: a task that
holds the GIL in C code starves the child's own watchdog, so the supervisor
kills a child whose task runs far past its deadline. With
``--metrics-port``, the process serving the children's metrics is watched
like a child: reaped, logged and started again when it dies.

Start method: ``fork``, after closing every database and Redis connection
the command process holds. A forked child starts in milliseconds with the
command's settings (also ones made by ``settings.configure()``), its task
registry and logging already in place, where ``spawn`` would import Django
and the project again for every child and every recycle. Forking is unsafe
when the parent has threads (a lock held by one of them stays held forever
in the child) or open sockets (parent and child would talk over the same
connection); the supervisor has neither: it never starts a thread, and it
closes the connections before the first fork (:meth:`Supervisor.run`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkProcess

from django.db import connections

from ..store import connection as redis_connection
from ..store.backoff import Backoff
from ..worker import Worker
from ..worker.board import Board
from ..worker.stuck import GIVE_UP_TIMEOUT
from ..worker.time_limits import DEFAULT_GRACE, time_limit_error
from .child import STOP_SIGNALS, Recycling, child_main
from .companion import (
    STABLE_AFTER,
    Companion,
    Keeper,
    describe_exit,
    restart_backoff,
)
from .rescue import NOBODY, Blame, rescue_main

logger = logging.getLogger(__name__)

#: How often the supervisor reads its children's deadlines.
LIMITS_INTERVAL = 1.0

#: How long past its deadline a task may run before the supervisor kills its
#: process. The child's own watchdog interrupts it at the deadline and, if
#: that fails, settles it and exits within its grace period and the time it
#: allows for that; this is for a child whose watchdog could not run at all.
HARD_LIMIT_MARGIN = DEFAULT_GRACE + GIVE_UP_TIMEOUT + 5.0

#: The companion's key among the slots to restart (the children's are 0..N-1).
_COMPANION = -1


@dataclass
class Totals:
    """What the worker processes reported when they exited."""

    processed: int = 0
    dead_lettered: int = 0
    reclaimed: int = 0
    #: children still running after the grace period, then killed
    killed: list[int] = field(default_factory=list)


@dataclass
class _Child:
    slot: int
    process: ForkProcess
    reports: Connection
    board: Board
    started: float
    #: (task, deadline) seen past the hard limit at the last reading
    overdue: set[tuple[uuid.UUID, float]] = field(default_factory=set)
    #: the tasks it was killed for, with the error to record
    culprits: dict[uuid.UUID, str] = field(default_factory=dict)


class Supervisor:
    """Run ``processes`` worker processes until :meth:`stop`.

    :param make_worker: builds the :class:`Worker` of one child, in the child.
    :param grace_period: seconds a graceful stop may take before the
        children still running are killed with SIGKILL.
    """

    def __init__(
        self,
        make_worker: Callable[[], Worker],
        *,
        processes: int,
        recycling: Recycling,
        grace_period: float,
    ) -> None:
        self.make_worker = make_worker
        #: restarted when it dies (see :meth:`keep`)
        self.companion: Keeper | None = None
        self.processes = processes
        self.recycling = recycling
        self.grace_period = grace_period
        self.totals = Totals()
        self._context = multiprocessing.get_context("fork")
        self._children: dict[int, _Child] = {}  # sentinel -> child
        #: sentinel -> a rescue process, and the pid of the child it rescues
        self._rescues: dict[int, tuple[ForkProcess, int]] = {}
        #: the grace period ran out and the children were killed
        self._forced = False
        #: slot -> when to start the child replacing one that died (or the
        #: companion, at _COMPANION)
        self._restarts: dict[int, float] = {}
        #: slot -> how many of its children died in a row, for the back-off
        #: each slot's child deaths in a row
        self._backoffs: dict[int, Backoff] = {}
        #: why a child refused to run (another project holds KEY_PREFIX):
        #: every child would, so the supervisor stops; the command says why
        self.refused: str | None = None
        self._stopping = False
        self._deadline: float | None = None
        self._next_limits = 0.0
        # A signal handler cannot interrupt wait() (PEP 475 retries it), so
        # stop() also writes to this pipe, which wait() watches.
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)

    # -- public ------------------------------------------------------------

    def run(self) -> Totals:
        """Start the children, keep them running, return once they stopped."""
        # Nothing opened here may reach a child: see the module docstring.
        connections.close_all()
        redis_connection.reset()
        for slot in range(self.processes):
            if not self._stopping:
                self._start(slot)
        logger.info(
            "delayq_worker: supervisor %d started %d worker process(es): %s",
            os.getpid(),
            len(self._children),
            ", ".join(str(c.process.pid) for c in self._children.values()),
        )
        try:
            while (
                self._children
                or self._rescues
                or (self._restarts and not self._stopping)
            ):
                self._step()
        finally:
            os.close(self._wake_read)
            os.close(self._wake_write)
        if self.totals.killed:
            logger.error(
                "delayq_worker: supervisor %d stopped; killed %s, still running "
                "after the grace period of %g s",
                os.getpid(),
                ", ".join(map(str, self.totals.killed)),
                self.grace_period,
            )
        else:
            logger.info("delayq_worker: supervisor %d stopped", os.getpid())
        return self.totals

    def keep(self, companion: Companion | None) -> None:
        """Keep ``companion`` (started already) running beside the children."""
        self.companion = None if companion is None else Keeper(companion)

    def stop(self) -> None:
        """Stop every child gracefully; kill those left after the grace period."""
        self._stopping = True
        with contextlib.suppress(OSError):  # full (already woken) or closed
            os.write(self._wake_write, b"\0")

    def kill(self) -> None:
        """Kill every child at once (SIGKILL); their tasks are reclaimed later."""
        self._signal_all(signal.SIGKILL)

    # -- the loop ------------------------------------------------------------

    def _step(self) -> None:
        now = time.monotonic()
        if self._stopping and self._deadline is None:
            self._deadline = now + self.grace_period
            logger.info(
                "delayq_worker: stopping %d worker process(es), grace period %g s",
                len(self._children),
                self.grace_period,
            )
            self._signal_all(signal.SIGTERM)
        if self._deadline is not None and now >= self._deadline:
            # The grace period is over: what the children still run is
            # abandoned, rolled back, and handed back (see _exited).
            self._deadline = math.inf
            self.totals.killed = [c.process.pid or 0 for c in self._children.values()]
            self._forced = True
            self.kill()
        for slot, due in list(self._restarts.items()):
            if not self._stopping and now >= due:
                del self._restarts[slot]
                self._restart(slot)
        if now >= self._next_limits:
            self._enforce_limits(now)
            self._next_limits = now + LIMITS_INTERVAL
        wake_ups = [] if self._stopping else list(self._restarts.values())
        companion = self.companion.sentinel if self.companion else None
        if self._children:
            wake_ups.append(self._next_limits)
        if self._deadline is not None and self._deadline < math.inf:
            wake_ups.append(self._deadline)
        timeout = max(min(wake_ups) - now, 0.0) if wake_ups else None
        watched = [self._wake_read, *self._children, *self._rescues]
        if companion is not None:
            watched.append(companion)
        ready = wait(watched, timeout)
        for sentinel in ready:
            if sentinel == self._wake_read:
                os.read(self._wake_read, 512)
            elif companion is not None and sentinel == companion:
                self._companion_exited()
            elif isinstance(sentinel, int) and sentinel in self._children:
                self._exited(self._children.pop(sentinel))
            elif isinstance(sentinel, int) and sentinel in self._rescues:
                self._rescued(*self._rescues.pop(sentinel))

    def _start(self, slot: int, *, replacing: bool = False) -> None:
        reports, child_end = self._context.Pipe(duplex=False)
        board = Board()
        process = self._context.Process(
            target=child_main,
            args=(self.make_worker, self.recycling, child_end, os.getpid(), board),
            name=f"delayq-worker-{slot}",
        )
        self._fork(process)
        child_end.close()  # the child holds its own copy
        self._children[process.sentinel] = _Child(
            slot, process, reports, board, time.monotonic()
        )
        if replacing:
            logger.info("delayq_worker: started worker process %d", process.pid)

    def _fork(self, process: ForkProcess) -> None:
        # Until the child has its own handlers, a SIGTERM would run the
        # supervisor's (inherited) handler in it and be lost: hold the
        # signals over the fork; the child takes them once it is ready.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def _exited(self, child: _Child) -> None:
        child.process.join()
        code = child.process.exitcode
        report = _read_report(child.reports)
        child.reports.close()
        if code != 0:
            self._rescue(child, code)
        child.board.close()
        for name in ("processed", "dead_lettered", "reclaimed"):
            setattr(self.totals, name, getattr(self.totals, name) + report.get(name, 0))
        pid = child.process.pid
        if self._stopping:
            if code != 0:
                logger.warning(
                    "delayq_worker: worker process %d %s", pid, describe_exit(code)
                )
            return
        refused = report.get("refused")
        if refused is not None:
            logger.error(
                "delayq_worker: worker process %d refused to run; stopping the "
                "supervisor",
                pid,
            )
            self.refused = str(refused)
            self.stop()
            return
        reason = report.get("recycled")
        if code == 0 and reason is not None:
            logger.info(
                "delayq_worker: worker process %d recycled %s; replacing it",
                pid,
                reason,
            )
            self._backoffs.pop(child.slot, None)
            self._start(child.slot, replacing=True)
            return
        lived = time.monotonic() - child.started
        if lived >= STABLE_AFTER:
            self._backoffs.pop(child.slot, None)
        delay = self._backoffs.setdefault(child.slot, restart_backoff()).failed()
        logger.error(
            "delayq_worker: worker process %d %s after %.1f s; starting another "
            "in %g s",
            pid,
            describe_exit(code),
            lived,
            delay,
        )
        self._restarts[child.slot] = time.monotonic() + delay

    def _restart(self, slot: int) -> None:
        if slot != _COMPANION:
            self._start(slot, replacing=True)
            return
        assert self.companion is not None
        retry = self.companion.restart()
        if retry is not None:
            self._restarts[slot] = time.monotonic() + retry

    def _companion_exited(self) -> None:
        assert self.companion is not None
        if self._stopping:  # its owner stops it anyway: only collect it
            self.companion.companion.reap()
            return
        delay = self.companion.exited()
        self._restarts[_COMPANION] = time.monotonic() + delay

    def _enforce_limits(self, now: float) -> None:
        """Kill a child whose task runs far past its time limit (see
        :data:`HARD_LIMIT_MARGIN`); its rescue charges that task."""
        for child in self._children.values():
            if child.culprits:
                continue  # killed already
            overdue = {
                (task.task_id, task.deadline): task.limit
                for task in child.board.running()
                if now > task.deadline + HARD_LIMIT_MARGIN
            }
            # Two readings a second apart must agree: see board.py.
            confirmed = {k: v for k, v in overdue.items() if k in child.overdue}
            child.overdue = set(overdue)
            if not confirmed:
                continue
            child.culprits = {
                task_id: f"{time_limit_error(limit)}, and could not be interrupted"
                for (task_id, _), limit in confirmed.items()
            }
            logger.critical(
                "delayq_worker: worker process %d has run task %s more than %g s "
                "past its time limit and does not respond (a task holding the "
                "GIL in C code?); killing it",
                child.process.pid,
                ", ".join(map(str, child.culprits)),
                HARD_LIMIT_MARGIN,
            )
            with contextlib.suppress(OSError):  # it has just exited
                os.kill(child.process.pid or 0, signal.SIGKILL)

    def _rescue(self, child: _Child, code: int | None) -> None:
        """Hand back at once what a child that died held, in a process of
        its own: the supervisor itself never talks to Redis or the database
        (see the module docstring)."""
        if child.culprits:
            blame = Blame(running=False, culprits=child.culprits)
        elif self._forced:
            blame = NOBODY  # killed by us to end a stop: no task took it down
        else:
            blame = Blame()
        process = self._context.Process(
            target=rescue_main,
            args=(
                self.make_worker,
                child.board.read(),
                child.process.pid,
                blame,
                describe_exit(code),
            ),
            name="delayq-rescue",
        )
        self._fork(process)
        self._rescues[process.sentinel] = (process, child.process.pid or 0)

    def _rescued(self, process: ForkProcess, pid: int) -> None:
        process.join()
        if process.exitcode != 0:
            logger.error(
                "delayq_worker: the rescue of worker process %d's tasks %s; "
                "other workers take them over after the visibility timeout",
                pid,
                describe_exit(process.exitcode),
            )

    def _signal_all(self, signum: int) -> None:
        # A copy: kill() also runs from a signal handler, between two steps
        # of the loop that may be changing the dict.
        for child in list(self._children.values()):
            with contextlib.suppress(OSError):  # it has just exited
                os.kill(child.process.pid or 0, signum)


def _read_report(reports: Connection) -> dict[str, int | str]:
    """The child's last words (see :func:`.child.child_main`); {} if none."""
    try:
        if reports.poll():
            report: dict[str, int | str] = json.loads(reports.recv_bytes())
            return report
    except (OSError, EOFError, ValueError):
        pass
    return {}
