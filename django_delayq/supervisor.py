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
import ctypes
import json
import logging
import math
import multiprocessing
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkProcess
from types import FrameType

from django.db import connections

from .store import connection as redis_connection
from .worker import Worker, WorkerStats

logger = logging.getLogger(__name__)

#: A child that dies unexpectedly is replaced after 1 s, then 2 s, 4 s...
#: up to this, so a crash loop (a broken deploy, a database refusing
#: connections) does not spin.
MAX_RESTART_DELAY = 30.0

#: A child that ran this long before dying starts the back-off afresh.
STABLE_AFTER = 60.0

#: How often a child checks its task count, its memory and its parent.
WATCH_INTERVAL = 0.1

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


@dataclass(frozen=True)
class Recycling:
    """When a worker process finishes its work in flight and is replaced."""

    max_tasks: int | None = None
    max_memory_mib: int | None = None


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
            target=_child_main,
            args=(self.make_worker, self.recycling, child_end, os.getpid()),
            name=f"delayq-worker-{slot}",
        )
        # Until the child has its own handlers, a SIGTERM would run the
        # supervisor's (inherited) handler in it and be lost: hold the
        # signals over the fork; the child takes them once it is ready.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
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
    """The child's last words (see :func:`_child_main`); {} if it had none."""
    try:
        if reports.poll():
            report: dict[str, int | str] = json.loads(reports.recv_bytes())
            return report
    except (OSError, EOFError, ValueError):
        pass
    return {}


# -- in the child ------------------------------------------------------------


def _child_main(
    make_worker: Callable[[], Worker],
    recycling: Recycling,
    reports: Connection,
    supervisor: int,
) -> None:
    """Run one worker; report its counts and why it stopped; exit 0."""
    _die_with(supervisor)
    worker = make_worker()
    watch = _Watch(worker, recycling, supervisor)

    def graceful(signum: int, frame: FrameType | None) -> None:
        # Each signal means "finish and exit": the supervisor forwards the
        # operator's SIGTERM, and a Ctrl-C or a systemd stop may reach the
        # child directly as well, so a second one must not abandon the work
        # in flight. Forcing is the supervisor's job (SIGKILL).
        worker.stop()

    for signum in _STOP_SIGNALS:
        signal.signal(signum, graceful)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)  # see _start()
    threading.Thread(target=watch.run, name="delayq-watch", daemon=True).start()
    stats = worker.run()
    watch.done.set()
    reports.send_bytes(json.dumps(_report(stats, watch.reason)).encode())
    reports.close()


def _report(stats: WorkerStats, reason: str | None) -> dict[str, int | str]:
    report: dict[str, int | str] = {
        "processed": stats.processed,
        "dead_lettered": stats.dead_lettered,
        "reclaimed": stats.reclaimed,
    }
    if reason is not None:
        report["recycled"] = reason
    return report


class _Watch:
    """A child's watcher thread: recycle it, or stop it if orphaned."""

    def __init__(self, worker: Worker, recycling: Recycling, supervisor: int) -> None:
        self.worker = worker
        self.recycling = recycling
        self.supervisor = supervisor
        self.reason: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        max_tasks = self.recycling.max_tasks
        max_memory = self.recycling.max_memory_mib
        seen = 0
        while not self.done.wait(WATCH_INTERVAL):
            if os.getppid() != self.supervisor:
                # The supervisor died (where PR_SET_PDEATHSIG is missing).
                self.worker.stop()
                return
            processed = self.worker.stats.processed
            if processed == seen:
                continue
            seen = processed
            if max_tasks is not None and processed >= max_tasks:
                self.reason = f"after {processed} tasks"
            elif max_memory is not None:
                # Checked after a task, never while idle: a process whose
                # baseline is over the limit would otherwise be replaced
                # again and again without running anything.
                rss = resident_mib()
                if rss > max_memory:
                    self.reason = f"at {rss:.0f} MiB (limit {max_memory} MiB)"
            if self.reason is not None:
                self.worker.stop()
                return


def resident_mib() -> float:
    """This process's resident set size, in MiB."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        # No /proc (macOS, BSD): the peak, in KiB on Linux and bytes on macOS.
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def _die_with(supervisor: int) -> None:
    """Get SIGTERM (a graceful stop) when the supervisor dies, even by SIGKILL.

    Without this a killed supervisor would leave its children running,
    unsupervised and invisible to the process manager that restarts it.
    Elsewhere than Linux the watcher thread polls ``getppid()`` instead.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != supervisor:
        # It died between the fork and prctl(): nothing would signal us.
        os._exit(0)
