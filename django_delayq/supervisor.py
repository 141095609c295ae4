"""The worker process model: a supervisor running N worker processes.

``delayq_worker --processes N`` (or any recycling option) makes the command
process a :class:`Supervisor`. It runs no tasks and opens no connection: it
forks the worker processes, replaces those that die or are recycled, and
turns SIGTERM into a graceful stop of every child, forced after a grace
period.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkProcess

from django.db import connections

from .store import connection as redis_connection
from .worker import Worker
from .worker_process import STOP_SIGNALS, Recycling, child_main

logger = logging.getLogger(__name__)

#: A child that dies unexpectedly is replaced after 1 s, then 2 s, 4 s...
#: up to this, so a crash loop (a broken deploy, a database refusing
#: connections) does not spin.
MAX_RESTART_DELAY = 30.0

#: A child that ran this long before dying starts the back-off afresh.
STABLE_AFTER = 60.0


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
    started: float


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
        self.processes = processes
        self.recycling = recycling
        self.grace_period = grace_period
        self.totals = Totals()
        self._context = multiprocessing.get_context("fork")
        self._children: dict[int, _Child] = {}  # sentinel -> child
        #: slot -> when to start the child replacing one that died
        self._restarts: dict[int, float] = {}
        #: slot -> how many of its children died in a row, for the back-off
        self._failures: dict[int, int] = {}
        self._stopping = False
        self._deadline: float | None = None
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
            while self._children or (self._restarts and not self._stopping):
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
            # abandoned. Their rows stay running and their stream entries
            # pending, so other workers take them over after the visibility
            # timeout.
            self._deadline = math.inf
            self.totals.killed = [c.process.pid or 0 for c in self._children.values()]
            self.kill()
        for slot, due in list(self._restarts.items()):
            if not self._stopping and now >= due:
                del self._restarts[slot]
                self._start(slot, replacing=True)
        wake_ups = [] if self._stopping else list(self._restarts.values())
        if self._deadline is not None and self._deadline < math.inf:
            wake_ups.append(self._deadline)
        timeout = max(min(wake_ups) - now, 0.0) if wake_ups else None
        ready = wait([self._wake_read, *self._children], timeout)
        for sentinel in ready:
            if sentinel == self._wake_read:
                os.read(self._wake_read, 512)
            elif isinstance(sentinel, int) and sentinel in self._children:
                self._exited(self._children.pop(sentinel))

    def _start(self, slot: int, *, replacing: bool = False) -> None:
        reports, child_end = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=child_main,
            args=(self.make_worker, self.recycling, child_end, os.getpid()),
            name=f"delayq-worker-{slot}",
        )
        # Until the child has its own handlers, a SIGTERM would run the
        # supervisor's (inherited) handler in it and be lost: hold the
        # signals over the fork; the child takes them once it is ready.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        child_end.close()  # the child holds its own copy
        self._children[process.sentinel] = _Child(
            slot, process, reports, time.monotonic()
        )
        if replacing:
            logger.info("delayq_worker: started worker process %d", process.pid)

    def _exited(self, child: _Child) -> None:
        child.process.join()
        code = child.process.exitcode
        report = _read_report(child.reports)
        child.reports.close()
        for name in ("processed", "dead_lettered", "reclaimed"):
            setattr(self.totals, name, getattr(self.totals, name) + report.get(name, 0))
        pid = child.process.pid
        if self._stopping:
            if code != 0:
                logger.warning(
                    "delayq_worker: worker process %d %s", pid, _describe(code)
                )
            return
        reason = report.get("recycled")
        if code == 0 and reason is not None:
            logger.info(
                "delayq_worker: worker process %d recycled %s; replacing it",
                pid,
                reason,
            )
            self._failures[child.slot] = 0
            self._start(child.slot, replacing=True)
            return
        lived = time.monotonic() - child.started
        failures = 0 if lived >= STABLE_AFTER else self._failures.get(child.slot, 0)
        self._failures[child.slot] = failures + 1
        delay = min(2.0**failures, MAX_RESTART_DELAY)
        logger.error(
            "delayq_worker: worker process %d %s after %.1f s; starting another "
            "in %g s",
            pid,
            _describe(code),
            lived,
            delay,
        )
        self._restarts[child.slot] = time.monotonic() + delay

    def _signal_all(self, signum: int) -> None:
        # A copy: kill() also runs from a signal handler, between two steps
        # of the loop that may be changing the dict.
        for child in list(self._children.values()):
            with contextlib.suppress(OSError):  # it has just exited
                os.kill(child.process.pid or 0, signum)


def _describe(code: int | None) -> str:
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def _read_report(reports: Connection) -> dict[str, int | str]:
    """The child's last words (see ``worker_process.child_main``); {} if none."""
    try:
        if reports.poll():
            report: dict[str, int | str] = json.loads(reports.recv_bytes())
            return report
    except (OSError, EOFError, ValueError):
        pass
    return {}
