"""One worker process under a supervisor (see :mod:`django_delayq.supervisor`).

The forked child runs one :class:`~django_delayq.worker.Worker`, turns every
SIGTERM or SIGINT into a graceful stop, recycles itself after a number of
tasks or past a memory size, stops if its supervisor dies, and reports its
counts and why it stopped over a pipe before it exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import FrameType

from ..exceptions import KeyPrefixInUse, WorkerStuck
from ..worker import Worker, WorkerStats
from ..worker.board import Board

#: How often a child checks its task count, its memory and its parent.
WATCH_INTERVAL = 0.1

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

#: The signals that stop a worker gracefully.
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


@dataclass(frozen=True)
class Recycling:
    """When a worker process finishes its work in flight and is replaced."""

    max_tasks: int | None = None
    max_memory_mib: int | None = None


def child_main(
    make_worker: Callable[[], Worker],
    recycling: Recycling,
    reports: Connection,
    supervisor: int,
    board: Board,
) -> None:
    """Run one worker; report its counts and why it stopped; exit 0."""
    _die_with(supervisor)
    worker = make_worker()
    worker.report_to(board)
    # The worker counts what it takes, so that a batch does not run past
    # the limit; the watcher only says why it stopped.
    worker.max_tasks = recycling.max_tasks
    watch = _Watch(worker, recycling, supervisor)

    def graceful(signum: int, frame: FrameType | None) -> None:
        # Each signal means "finish and exit": the supervisor forwards the
        # operator's SIGTERM, and a Ctrl-C or a systemd stop may reach the
        # child directly as well, so a second one must not abandon the work
        # in flight. Forcing is the supervisor's job (SIGKILL).
        worker.stop()

    for signum in STOP_SIGNALS:
        signal.signal(signum, graceful)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # see _start()
    threading.Thread(target=watch.run, name="delayq-watch", daemon=True).start()
    reason = None
    refused = None
    try:
        stats = worker.run()
    except WorkerStuck:
        # Logged by the worker; the stuck thread dies with this process, and
        # the supervisor starts a fresh one at once.
        stats = worker.stats
        reason = "because a task ran past its time limit and could not be interrupted"
    except KeyPrefixInUse as exc:
        # Logged by the check. A fresh process would be refused as well: the
        # supervisor stops instead of replacing this one again and again.
        stats = worker.stats
        refused = str(exc)
    watch.done.set()
    max_tasks = recycling.max_tasks
    if reason is None and max_tasks is not None and stats.processed >= max_tasks:
        reason = f"after {stats.processed} tasks"
    report = report_of(stats, reason or watch.reason)
    if refused is not None:
        report["refused"] = refused
    reports.send_bytes(json.dumps(report).encode())
    reports.close()


def report_of(stats: WorkerStats, reason: str | None) -> dict[str, int | str]:
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
