"""Processes started, waited for and stopped one way: the private servers
(:mod:`tools.servers`), the commands the tests and the fault scenarios run,
and the benchmarks' workers.

mirakuru's executors do the work: each process leads a session of its own (a
Ctrl-C at a terminal does not reach it before its owner is done with it, and
it stops together with its children), readiness is polled by a check (an
HTTP answer, a server's own proof of life), and a stop signals the group,
waits out a grace period, then SIGKILLs. What this module adds:

- the output goes to a log file, appended across restarts, which a failing
  test shows, instead of a pipe that blocks the process once nobody reads it;
- the kernel signals the process when the thread that started it dies
  (``PR_SET_PDEATHSIG``), so a killed test run leaves nothing behind;
- a user to run as (PostgreSQL refuses to run as root);
- exactly the environment given (mirakuru only adds to ``os.environ``);
- a stop never raises because of the exit code: teardown must go on.

Readiness by output is read from the log file with :func:`wait_for`, not
with mirakuru's OutputExecutor, which reads a pipe and would leave it full.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import pwd
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import mirakuru.base
from mirakuru import Executor, HTTPExecutor, SimpleExecutor
from mirakuru.exceptions import ProcessFinishedWithError

__all__ = [
    "LOOPBACK",
    "ROOT",
    "CheckedProcess",
    "HTTPProcess",
    "ManagedProcess",
    "NotReached",
    "Process",
    "django_command",
    "free_port",
    "log_tail",
    "run_as",
    "stop_together",
    "wait_for",
]

LOOPBACK = "127.0.0.1"

#: The repository: the project's commands run from here.
ROOT = Path(__file__).resolve().parents[1]

# mirakuru's exit hook SIGKILLs every process whose mirakuru_uuid variable
# merely contains this interpreter's PID as text: on a shared machine that
# can be another test run's server. Each process here is stopped by its
# owner, and by the kernel when the thread that started it dies.
atexit.unregister(mirakuru.base.cleanup_subprocesses)

#: Where :func:`free_port` looks: below Linux's ephemeral range (32768-60999
#: by default), from which the kernel picks the local port of every outgoing
#: connection. A port from that range, given up by a server the tests stop
#: and start again (a killed Redis, a cluster node and its bus port), can be
#: taken by a client's connection meanwhile, and the restart then fails.
_PORTS = range(10_000, 32_768)

#: Every port :func:`free_port` returned in this process. A server binds its
#: port only when it starts, so two servers built before either starts (the
#: six nodes of a cluster, each with a client port and a bus port) would
#: otherwise be able to draw the same free port.
_handed_out: set[int] = set()

_PR_SET_PDEATHSIG = 1


class NotReached(TimeoutError):
    """A condition :func:`wait_for` polled did not become true in time."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now.

    It is never one this process was given before. Another process may
    take it before the caller binds it; the servers pick a fresh port when
    that happens on their first start.
    """
    for _ in range(200):
        port = random.choice(_PORTS)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue  # in use, or still in TIME_WAIT
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        fallback: int = sock.getsockname()[1]
        return fallback


def wait_for(
    condition: Callable[[], object],
    seconds: float,
    what: str,
    *,
    poll: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (),
) -> None:
    """Poll ``condition`` until it is true; :class:`NotReached` naming
    ``what`` after ``seconds``. Exceptions of the ``ignoring`` types count as
    "not yet" (a server still starting refuses connections)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if condition():
                return
        except ignoring:
            pass
        if time.monotonic() > deadline:
            raise NotReached(f"not reached within {seconds:g} s: {what}")
        time.sleep(poll)


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file, for an error message."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def run_as(user: str) -> dict[str, Any]:
    """Popen options that run the child as ``user``, with that user's groups."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ValueError(f"no system user {user!r} to run as") from None
    return {
        "user": entry.pw_uid,
        "group": entry.pw_gid,
        "extra_groups": os.getgrouplist(user, entry.pw_gid),
    }


def _new_session(death_signal: int | None) -> Callable[[], None]:
    """What the child runs before exec: lead a session (as mirakuru does),
    and ask the kernel for ``death_signal`` when the starting thread dies.
    Python runs it after the switch of user, which would clear the request
    if it came before."""

    def prepare() -> None:
        os.setsid()
        if death_signal is not None:
            with contextlib.suppress(OSError, AttributeError):
                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(_PR_SET_PDEATHSIG, int(death_signal))

    return prepare


class ManagedProcess(SimpleExecutor):
    """A mirakuru executor with the additions of this module (see above);
    the base of the kinds below."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        label: str = "",
        grace: float = 10.0,
        start_timeout: float = 30.0,
        stop_signal: int = signal.SIGTERM,
        death_signal: int | None = signal.SIGKILL,
        user: str | None = None,
        **executor: Any,
    ) -> None:
        super().__init__(
            list(argv),
            cwd=str(cwd) if cwd is not None else None,
            timeout=grace,
            sleep=0.05,
            stop_signal=stop_signal,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            popen_kwargs=run_as(user) if user else {},
            **executor,
        )
        self.label = label or Path(argv[0]).name
        self.log_path = log_path
        self._env = dict(env) if env is not None else None
        self._death_signal = death_signal
        # mirakuru has one timeout for starting and stopping; these are two.
        self.grace = grace
        self.start_timeout = start_timeout
        self.stop_signal = stop_signal
        #: The last process started, kept after a stop for its exit code.
        self.popen: subprocess.Popen[str] | None = None

    @property
    def envvars(self) -> dict[str, str]:
        if self._env is None:
            return super().envvars
        return {**self._env, mirakuru.base.ENV_UUID: self._uuid}

    @property
    def _popen_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = super()._popen_kwargs
        kwargs["preexec_fn"] = _new_session(self._death_signal)
        return kwargs

    def start(self) -> Self:
        if self.running():
            return self
        self.process = None  # a process that exited on its own
        self._timeout = self.start_timeout
        with self.log_path.open("a") as log:
            self._stdout = log
            try:
                return super().start()
            finally:
                self.popen = self.process
                self._stdout = None

    @property
    def pid(self) -> int | None:
        """The PID while the process runs."""
        return self.process.pid if self.running() and self.process else None

    def alive(self) -> bool:
        return self.running()

    def stop(
        self, stop_signal: int | None = None, expected_returncode: int | None = None
    ) -> Self:
        """Signal the group, wait out the grace period, SIGKILL what is left;
        whatever the exit code."""
        self._timeout = self.grace
        with contextlib.suppress(ProcessFinishedWithError):
            super().stop(stop_signal, expected_returncode)
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 25) -> str:
        return log_tail(self.log_path, lines)


class Process(ManagedProcess):
    """A command run until it is stopped: ready when it says so in its log
    (the caller waits with :func:`wait_for`), or at once."""


class HTTPProcess(ManagedProcess, HTTPExecutor):
    """A web server, ready once ``url`` answers with a 2xx status."""


class CheckedProcess(ManagedProcess, Executor):
    """A server, ready once ``ready(pid)`` is true: a check that proves that
    this very process answers, not another one on the same port."""

    def __init__(
        self, argv: Sequence[str], *, ready: Callable[[int], bool], **kwargs: Any
    ) -> None:
        super().__init__(argv, **kwargs)
        self._ready = ready

    def pre_start_check(self) -> bool:
        # Nothing to find before the start: a port taken meanwhile shows in
        # the log, and the server's owner picks another.
        return False

    def after_start_check(self) -> bool:
        return self.process is not None and self._ready(self.process.pid)


def django_command(
    command: str,
    *args: str,
    verbosity: int,
    log_path: Path,
    env: Mapping[str, str],
    label: str = "",
) -> Process:
    """Start ``python -m django COMMAND`` with this interpreter, from the
    repository, in ``env`` (which names the settings)."""
    process = Process(
        [sys.executable, "-m", "django", command, "-v", str(verbosity), *args],
        log_path=log_path,
        env=env,
        cwd=ROOT,
        label=label or command,
    )
    process.start()
    return process


def stop_together(processes: Sequence[ManagedProcess], grace: float = 15.0) -> None:
    """Stop every process within one grace period, not one each: each leader
    gets its stop signal first (its own graceful shutdown, which stops its
    children its way), then whatever is left of each group is SIGKILLed."""
    for process in processes:
        if process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, process.stop_signal)
    deadline = time.monotonic() + grace
    for process in processes:
        if process.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        process.kill()
