"""Serving ``/metrics`` over HTTP for the commands.

One process (a dispatcher, a sweeper, a worker, ``delayq_run``):
:func:`serve_this_process` runs prometheus-client's HTTP server in a thread
of the process, on the default registry (this process's counters, its
``process_*`` and ``python_*`` metrics) plus the backlog gauges.

``delayq_worker --processes N``: the tasks run in forked children, each
with counters of its own, and the supervisor must not start a thread (it
forks; see :mod:`django_delayq.supervisor`). :class:`AggregateServer`
follows prometheus-client's multi-process mode: ``PROMETHEUS_MULTIPROC_DIR``
is set (to a fresh temporary directory, unless the environment names one,
which is emptied) before prometheus-client is imported, so every child
writes its counters and histograms to files there, and a separate process,
forked before the workers, serves their sum and the backlog gauges. A child
that is recycled leaves its files: its counts stay in the sums, as counters
must. The supervisor watches the serving process too, and starts another
when it dies (:meth:`AggregateServer.restart`).

A directory named by the environment is the operator's; it must be a real
directory (not a symlink) owned by the user running the command and
writable by no one else (no group or world write bit), since the metrics
written there are read back and summed, and it is emptied of ``*.db``
files without following symlinks. One created here is ``0700``.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import ForkProcess
from pathlib import Path

from django.db import connections

from ..exceptions import MetricsUnavailable
from ..store import connection as redis_connection
from . import enable

logger = logging.getLogger(__name__)

#: How long the command waits for the metrics process to listen.
START_TIMEOUT = 15.0

_ENV = "PROMETHEUS_MULTIPROC_DIR"


def serve_this_process(addr: str, port: int) -> Callable[[], None]:
    """Serve this process's metrics and the backlog on ``addr:port``; return
    the function that stops the server.

    :raises MetricsUnavailable: prometheus-client is not installed.
    :raises OSError: the address cannot be listened on.
    """
    enable()
    from prometheus_client import REGISTRY, start_http_server

    from .collector import BacklogCollector

    backlog = BacklogCollector(close_connections=True)
    REGISTRY.register(backlog)
    try:
        httpd, thread = start_http_server(port, addr)
    except BaseException:
        REGISTRY.unregister(backlog)
        raise

    def stop() -> None:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
        # The default registry outlives the command (call_command() in a
        # test, a second command in one process): leave it as it was.
        REGISTRY.unregister(backlog)

    return stop


class AggregateServer:
    """Serve the sum of a supervisor's children's metrics from a process of
    its own; see the module docstring."""

    def __init__(self, addr: str, port: int) -> None:
        self.addr, self.port = addr, port
        self.name = f"metrics process serving http://{addr}:{port}/metrics"
        self._at = (addr, port)
        self.directory = ""
        self._owned = False
        self._process: ForkProcess | None = None

    def start(self) -> None:
        """Prepare the directory, start counting, fork the serving process.

        :raises MetricsUnavailable: prometheus-client is not installed, or
            was imported before the directory could be set.
        :raises OSError: the serving process could not listen.
        """
        self._prepare_directory()
        try:
            self._start()
        except BaseException:
            # Nothing half-started: no process, no directory of ours left.
            self.stop()
            raise

    def _start(self) -> None:
        enable()
        from prometheus_client import values

        if values.ValueClass is values.MutexValue:
            raise MetricsUnavailable(
                f"prometheus-client was imported before {_ENV} was set, so the "
                f"worker processes cannot share their metrics: set {_ENV} in "
                f"the environment of delayq_worker (an empty directory of its "
                f"own)"
            )
        # The serving process opens its own connections; none of these may
        # reach it (nor, later, the workers the supervisor forks).
        connections.close_all()
        redis_connection.reset()
        context = multiprocessing.get_context("fork")
        reader, writer = context.Pipe(duplex=False)
        process = context.Process(
            target=_serve_aggregate,
            args=(self.addr, self.port, self.directory, writer, os.getpid()),
            name="delayq-metrics",
        )
        process.start()
        writer.close()
        self._process = process
        try:
            if not reader.poll(START_TIMEOUT):
                raise OSError(f"the metrics process did not start in {START_TIMEOUT} s")
            message = reader.recv_bytes().decode()
        except EOFError as exc:
            raise OSError(f"the metrics process failed: {exc}") from exc
        finally:
            reader.close()
        if message != "ok":
            raise OSError(message)
        logger.info("metrics process %d listening on %s:%d", process.pid, *self._at)

    @property
    def sentinel(self) -> int | None:
        """Ready for ``multiprocessing.connection.wait`` once the serving
        process has exited; None when there is none."""
        return None if self._process is None else self._process.sentinel

    def reap(self) -> tuple[int, int | None]:
        """Collect the serving process that exited (no zombie left); its pid
        and exit code."""
        process, self._process = self._process, None
        if process is None:
            return 0, None
        process.join()
        return process.pid or 0, process.exitcode

    def restart(self) -> int:
        """Start another serving process, on the same address and directory;
        its pid.

        :raises OSError: it could not listen (it is gone again then).
        """
        try:
            self._start()
        except BaseException:
            self._end_process()
            raise
        assert self._process is not None
        return self._process.pid or 0

    def stop(self) -> None:
        """Stop the serving process; remove the directory if it made it."""
        self._end_process()
        if self._owned:
            shutil.rmtree(self.directory, ignore_errors=True)
            os.environ.pop(_ENV, None)
            self._owned = False

    def _end_process(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()

    def _prepare_directory(self) -> None:
        named = os.environ.get(_ENV) or os.environ.get(_ENV.lower())
        if named:
            # prometheus-client: "This directory must be wiped between
            # process runs": files of an earlier run would add to the sums.
            empty_directory(Path(named))
            self.directory = named
        else:
            self.directory = tempfile.mkdtemp(prefix="delayq-metrics-")  # 0700
            os.environ[_ENV] = self.directory
            self._owned = True


def empty_directory(directory: Path) -> None:
    """Make ``directory`` (``0700`` if it is new) and delete the ``*.db``
    files in it, never following a symlink: a link named ``*.db`` is removed
    itself, and its target is left alone.

    :raises MetricsUnavailable: it is a symlink, not a directory, owned by
        another user, or writable by its group or by every user.
    """
    directory.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o700)
    try:
        # O_NOFOLLOW: the directory itself is not a symlink; every deletion
        # below is relative to this descriptor, so a rename of the path
        # meanwhile cannot point it elsewhere.
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        kind = (
            "a symlink"
            if directory.is_symlink()
            else "not a directory"
            if directory.exists()
            else f"not usable ({exc.strerror})"
        )
        raise MetricsUnavailable(
            f"{_ENV}={str(directory)!r} is {kind}: name a directory of its own "
            f"(it is created 0700 if missing), or leave {_ENV} unset for a "
            f"temporary one"
        ) from exc
    try:
        _refuse_shared(fd, directory)
        for entry in os.scandir(fd):
            if not entry.name.endswith(".db"):
                continue
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                os.unlink(entry.name, dir_fd=fd)  # a link itself, never its target
    finally:
        os.close(fd)


def check_private(directory: Path) -> None:
    """Refuse a ``directory`` of metrics files that another user may have
    written to, as :func:`empty_directory` does, without emptying it: the
    metrics view of a web server reads it on each scrape.

    :raises MetricsUnavailable: as :func:`empty_directory`.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise MetricsUnavailable(
            f"{_ENV}={str(directory)!r} is not a directory this process can "
            f"read ({exc.strerror}), or is a symlink: name a directory of its "
            f"own"
        ) from exc
    try:
        _refuse_shared(fd, directory)
    finally:
        os.close(fd)


def _refuse_shared(fd: int, directory: Path) -> None:
    """Refuse the open directory ``fd`` unless only this user may write to it."""
    found = os.fstat(fd)
    owner = found.st_uid
    if owner != os.geteuid():
        raise MetricsUnavailable(
            f"{_ENV}={str(directory)!r} belongs to another user (uid "
            f"{owner}, not {os.geteuid()}): its *.db files would be read "
            f"into the metrics and deleted; name a directory of this user's "
            f"own, or leave {_ENV} unset for a temporary one"
        )
    mode = stat.S_IMODE(found.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        # Whoever may create files there may plant *.db files that the
        # metrics process sums as ours (a sticky bit, as on /tmp, does
        # not stop a new file).
        who = "every user" if mode & stat.S_IWOTH else "its group"
        raise MetricsUnavailable(
            f"{_ENV}={str(directory)!r} is writable by {who} (mode "
            f"{mode:04o}): another user could plant *.db files there that "
            f"would be read into the metrics; make it private "
            f"(chmod 700 {str(directory)!r}, or 750 to let the group "
            f"read it), or leave {_ENV} unset for a temporary one"
        )


def _serve_aggregate(
    addr: str, port: int, directory: str, ready: Connection, parent: int
) -> None:
    """The serving process: listen, say so, serve until the parent is gone."""
    # Inherited from the command: a SIGTERM must end this process, and a
    # Ctrl-C reaching the whole process group is the command's to handle.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    from .collector import BacklogCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    registry.register(BacklogCollector(close_connections=True))
    try:
        start_http_server(port, addr, registry=registry)
    except OSError as exc:
        ready.send_bytes(f"cannot listen on {addr}:{port}: {exc}".encode())
        return
    ready.send_bytes(b"ok")
    ready.close()
    # A supervisor killed by SIGKILL cannot stop this process: it notices.
    with contextlib.suppress(KeyboardInterrupt):
        while os.getppid() == parent:
            time.sleep(1.0)
