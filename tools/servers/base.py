"""What every private server shares: a port of its own on 127.0.0.1, a
directory for its data and log, and a process started, checked and stopped
through :mod:`tools.procs`.

Neither pytest-redis nor pytest-postgresql fits here: the same servers run
outside pytest (the benchmarks, ``make example``), the fault scenarios kill,
freeze and restart one server on its port and data directory, and
pytest-postgresql starts PostgreSQL as the current user, which PostgreSQL
refuses when that is root.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import signal
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Self

from mirakuru.exceptions import ExecutorError

from tools.procs import CheckedProcess, free_port, log_tail


class ServerError(RuntimeError):
    """A server could not be found, started or stopped."""


def system_user_as_root(user: str, refusal: str) -> str | None:
    """The system ``user`` to run a server as when we are root (None when we
    are not): servers that refuse root. ``refusal`` starts the error when
    the user is missing, e.g. "PostgreSQL refuses to run as root"; the
    error goes on with the package that creates the user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise ServerError(
            f"{refusal} and there is no {user!r} user to run it as: "
            f"`apt-get install {PACKAGE_OF_USER.get(user, user)}` creates one"
        ) from None
    return user


#: The Debian package that creates each system user the servers run as.
PACKAGE_OF_USER = {"postgres": "postgresql", "mysql": "mariadb-server"}


class Started:
    """``with x:`` starts ``x`` and closes it, whatever happens inside: the
    servers, and the sets of servers in tools.servers.cluster and .sentinel."""

    def start(self) -> Self:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Server(Started):
    """Process bookkeeping shared by the concrete servers."""

    name = "server"
    start_timeout = 10.0
    #: A clean stop: this signal, then SIGKILL after ``grace`` seconds.
    stop_signal = signal.SIGTERM
    grace = 10.0
    #: As a crash would.
    kill_signal = signal.SIGKILL
    # Log text meaning another process bound the port between free_port()
    # and our bind (both servers print the OS message as is).
    port_taken_marker = "Address already in use"

    def __init__(
        self, port: int | None, data_dir: Path | None, die_with_parent: bool
    ) -> None:
        self._auto_port = not port
        self.port: int = port or free_port()
        self._owns_dir = data_dir is None
        self._dir = Path(data_dir) if data_dir is not None else None
        self._die_with_parent = die_with_parent
        self._process: CheckedProcess | None = None
        self._started_once = False
        self._at_exit = False

    # -- hooks for subclasses ---------------------------------------------

    @property
    def log_path(self) -> Path:
        raise NotImplementedError

    def _prepare(self) -> None:
        """Get the directory ready before each start."""

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def _user(self) -> str | None:
        """The system user to run as (None: as ourselves)."""
        return None

    def _is_ready(self, pid: int) -> bool:
        raise NotImplementedError

    def _choose_ports(self) -> None:
        """Draw fresh ports after another process took one before our bind."""
        self.port = free_port()

    def _after_first_start(self) -> None:
        """Run once, after the first successful start."""

    # -- public API -------------------------------------------------------

    @property
    def dir(self) -> Path:
        """Directory holding the server's data and log."""
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix=f"delayq-{self.name}-"))
        return self._dir

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.alive()

    def start(self) -> Self:
        """Start the server and wait until it serves requests."""
        if self.is_running():
            return self
        if not self._at_exit:
            # A crashed or interrupted run must not leave servers or their
            # directories behind, even when this start fails.
            atexit.register(self.close)
            self._at_exit = True
        # After the first start the port is fixed: callers hold URLs to it.
        attempts = 3 if self._auto_port and not self._started_once else 1
        for attempt in range(1, attempts + 1):
            offset = self._log_size()
            try:
                self._spawn()
            except ServerError:
                if attempt < attempts and self._lost_port_race(offset):
                    self._choose_ports()
                    continue
                raise
            break
        if not self._started_once:
            self._started_once = True
            self._after_first_start()
        return self

    def stop(self) -> None:
        """Shut down cleanly, escalating to SIGKILL; the data dir is kept."""
        if self._process is not None:
            self._process.stop()
            self._process = None

    def kill(self) -> None:
        """Stop abruptly, as a crash would; the data dir is kept."""
        if self._process is not None:
            self._process.kill(sig=self.kill_signal)
            self._process = None

    def restart(self) -> Self:
        """Stop cleanly and start again on the same port with the same dir."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop and delete the data dir if this object created it."""
        self.stop()
        if self._owns_dir and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if self._at_exit:
            atexit.unregister(self.close)
            self._at_exit = False

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.is_running() else "stopped"
        return f"<{type(self).__name__} port {self.port} {state}>"

    # -- internals --------------------------------------------------------

    def _spawn(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._prepare()
        process = CheckedProcess(
            self._argv(),
            ready=self._is_ready,
            log_path=self.log_path,
            cwd=self.dir,
            label=self.name,
            grace=self.grace,
            start_timeout=self.start_timeout,
            stop_signal=self.stop_signal,
            # If the thread that starts the server dies without cleaning up
            # (SIGKILL, os._exit), the kernel stops the server too.
            death_signal=self.stop_signal if self._die_with_parent else None,
            user=self._user(),
        )
        try:
            process.start()
        except (ExecutorError, OSError) as exc:
            process.kill()
            raise ServerError(
                f"{self.name} did not start on port {self.port} ({exc}); end of "
                f"{self.log_path}:\n{log_tail(self.log_path)}"
            ) from None
        self._process = process

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _lost_port_race(self, offset: int) -> bool:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return False
        return self.port_taken_marker in text
