"""Private Redis and PostgreSQL servers on free loopback ports.

The test suite, the fault tests, ``make example`` and the benchmarks need
throw-away servers that never touch a system-wide instance: every server here
listens on 127.0.0.1 only, on a port of its own, with its files in a temporary
directory, and is stopped by its PID.

Library use::

    with RedisServer() as redis, PostgresServer() as pg:
        ...  # redis.url, pg.django_settings()

Command line (the servers live exactly as long as the command)::

    python -m tools.servers run --redis --postgres -- pytest -x

Only the standard library is used, so any interpreter can run this module
before a virtualenv exists.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, BinaryIO, Self
from urllib.parse import quote

__all__ = [
    "LOOPBACK",
    "PostgresServer",
    "RedisServer",
    "ServerError",
    "Started",
    "free_port",
    "main",
    "wait_until",
]

LOOPBACK = "127.0.0.1"

# What to send, and how many seconds to wait for the process to exit before
# going on to the next, harsher signal.
Escalation = Sequence[tuple[signal.Signals, float]]


class ServerError(RuntimeError):
    """A server could not be found, started or stopped."""


#: Where :func:`free_port` looks: below Linux's ephemeral range (32768-60999
#: by default), from which the kernel picks the local port of every outgoing
#: connection. A port from that range, given up by a server the tests stop
#: and start again (a killed Redis, a cluster node and its bus port), can be
#: taken by a client's connection meanwhile, and the restart then fails.
_PORTS = range(10_000, 32_768)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now.

    Another process may take it before the caller binds it; the servers below
    pick a fresh port when that happens on their first start.
    """
    for _ in range(200):
        port = random.choice(_PORTS)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue  # in use, or still in TIME_WAIT
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        fallback: int = sock.getsockname()[1]
        return fallback


def wait_until(
    condition: Callable[[], object],
    what: str,
    timeout: float = 30.0,
    *,
    ignoring: tuple[type[BaseException], ...] = (),
) -> None:
    """Poll ``condition`` every 0.1 s until it is true; :class:`ServerError`
    naming ``what`` after ``timeout`` seconds. Exceptions of the ``ignoring``
    types count as "not yet" (a server still starting refuses connections)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except ignoring:
            pass
        if time.monotonic() > deadline:
            raise ServerError(f"not reached within {timeout:g} s: {what}")
        time.sleep(0.1)


class Started:
    """``with x:`` starts ``x`` and closes it, whatever happens inside: the
    servers, and the sets of servers in tools.cluster and tools.sentinel."""

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


class _Server(Started):
    """Process bookkeeping shared by the concrete servers."""

    name = "server"
    start_timeout = 10.0
    stop_steps: Escalation = ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0))
    kill_steps: Escalation = ((signal.SIGKILL, 5.0),)
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
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_once = False
        self._at_exit = False

    # -- hooks for subclasses ---------------------------------------------

    @property
    def log_path(self) -> Path:
        raise NotImplementedError

    def _prepare(self) -> None:
        """Get the directory ready before each spawn."""

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def _user_args(self) -> list[str]:
        """setpriv options that switch user (empty: run as ourselves)."""
        return []

    def _is_ready(self, pid: int) -> bool:
        raise NotImplementedError

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
        return self._proc.pid if self.is_running() and self._proc else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

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
                self._wait_ready()
            except ServerError:
                self._terminate(self.kill_steps)
                if attempt < attempts and self._lost_port_race(offset):
                    self.port = free_port()
                    continue
                raise
            break
        if not self._started_once:
            self._started_once = True
            self._after_first_start()
        return self

    def stop(self) -> None:
        """Shut down cleanly, escalating to SIGKILL; the data dir is kept."""
        self._terminate(self.stop_steps)

    def kill(self) -> None:
        """Stop abruptly, as a crash would; the data dir is kept."""
        self._terminate(self.kill_steps)

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
        argv = self._argv()
        user_args = self._user_args()
        setpriv = shutil.which("setpriv")
        if user_args and setpriv is None:
            raise ServerError(
                f"{self.name}: setpriv (util-linux) is needed to run as another user"
            )
        if setpriv and (user_args or self._die_with_parent):
            wrapper = [setpriv, *user_args]
            if self._die_with_parent:
                # If the thread that starts the server dies without cleaning
                # up (SIGKILL, os._exit), the kernel stops the server too.
                wrapper += ["--pdeathsig", self.stop_steps[0][0].name]
            # setpriv execs the server, so Popen.pid is the server's PID.
            argv = [*wrapper, "--", *argv]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                argv,
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Ctrl-C at a terminal must not reach the server before the
                # programs using it have finished: its owner stops it.
                start_new_session=True,
            )

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise ServerError(
                    f"{self.name} exited with code {code} while starting on port "
                    f"{self.port}; end of {self.log_path}:\n{self._log_tail()}"
                )
            if self._is_ready(self._proc.pid):
                return
            if time.monotonic() > deadline:
                raise ServerError(
                    f"{self.name} (pid {self._proc.pid}) not ready on port "
                    f"{self.port} after {self.start_timeout:g} s; end of "
                    f"{self.log_path}:\n{self._log_tail()}"
                )
            time.sleep(0.05)

    def _terminate(self, steps: Escalation) -> None:
        proc = self._proc
        if proc is None:
            return
        for sig, timeout in steps:
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                continue
            break
        if proc.poll() is None:
            raise ServerError(f"{self.name} (pid {proc.pid}) did not exit")
        self._proc = None

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

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


# -- Redis ------------------------------------------------------------------


def _redis_binary() -> str:
    found = shutil.which("redis-server")
    if found is None and os.access("/usr/bin/redis-server", os.X_OK):
        found = "/usr/bin/redis-server"
    if found is None:
        raise ServerError(
            "redis-server not found: install it with "
            "`apt-get install redis-server` (tools/bootstrap.sh does)"
        )
    return found


def _resp(args: Sequence[str]) -> bytes:
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        parts += [f"${len(data)}\r\n".encode(), data, b"\r\n"]
    return b"".join(parts)


def _read_reply(stream: BinaryIO) -> bytes:
    """Read one reply: a status, error or integer line, or a bulk body."""
    head = stream.readline()
    if not head.endswith(b"\r\n"):
        raise ConnectionError("connection closed")
    head = head[:-2]
    if not head.startswith(b"$") or head == b"$-1":
        return head
    size = int(head[1:]) + 2  # the body ends with CRLF
    body = stream.read(size)
    if len(body) < size:
        raise ConnectionError("connection closed")
    return body[:-2]


def _redis_call(
    port: int, *args: str, password: str | None = None, timeout: float = 1.0
) -> bytes:
    """Send one command over RESP, authenticating first if a password is set."""
    with (
        socket.create_connection((LOOPBACK, port), timeout=timeout) as sock,
        sock.makefile("rb") as stream,
    ):
        if password is not None:
            sock.sendall(_resp(["AUTH", password]))
            reply = _read_reply(stream)
            if reply != b"+OK":
                return reply
        sock.sendall(_resp(args))
        return _read_reply(stream)


class RedisServer(_Server):
    """A private ``redis-server`` on 127.0.0.1.

    Without ``persistence`` the server never writes a snapshot and every
    start, including ``restart()``, begins with an empty dataset. With
    ``persistence=True`` the snapshot file ``dump.rdb`` in :attr:`dir` is
    kept and loaded on every start, so a test can ``SAVE``, ``kill()`` or
    ``stop()`` and come back to that data; ``save`` is Redis's ``save``
    setting (``""``: snapshots only on an explicit ``SAVE``/``BGSAVE``,
    ``"1 1"``: every second when a key changed).

    ``password`` sets ``requirepass`` and goes into :attr:`url`.

    ``die_with_parent`` makes the kernel stop the server when the thread that
    started it exits, so keep it on only when starting from a long-lived
    thread (the main thread, as pytest fixtures do).
    """

    name = "redis"
    dbfilename = "dump.rdb"

    def __init__(
        self,
        port: int | None = None,
        *,
        data_dir: Path | None = None,
        extra_args: Sequence[str] = (),
        persistence: bool = False,
        save: str = "",
        password: str | None = None,
        die_with_parent: bool = True,
    ) -> None:
        if save and not persistence:
            raise ValueError("save= only applies with persistence=True")
        super().__init__(port, data_dir, die_with_parent)
        self.extra_args = list(extra_args)
        self.persistence = persistence
        self.save = save
        self.password = password

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}{LOOPBACK}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.dir / "redis.log"

    @property
    def rdb_path(self) -> Path:
        return self.dir / self.dbfilename

    def ping(self) -> bool:
        """True if something answers PING on our port."""
        try:
            return self.call("PING") == b"+PONG"
        except OSError:
            return False

    def call(self, *args: str) -> bytes:
        """Run one command; return its status or error line, or bulk reply.

        Enough for a quick look (``call("DBSIZE")``) without a client library.
        """
        return _redis_call(self.port, *args, password=self._requirepass())

    def _requirepass(self) -> str | None:
        # The password may also come as --requirepass in extra_args.
        password = self.password
        for flag, value in zip(self.extra_args, self.extra_args[1:], strict=False):
            if flag == "--requirepass":
                password = value
        return password

    def _prepare(self) -> None:
        if not self.persistence:
            # Redis loads any snapshot it finds (a test may have run SAVE).
            self.rdb_path.unlink(missing_ok=True)

    def _argv(self) -> list[str]:
        return [
            _redis_binary(),
            "--bind", LOOPBACK,
            "--port", str(self.port),
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--dir", str(self.dir),
            "--dbfilename", self.dbfilename,
            "--save", self.save,
            "--appendonly", "no",
            *(["--requirepass", self.password] if self.password else []),
            *self.extra_args,
        ]  # fmt: skip

    def _is_ready(self, pid: int) -> bool:
        # Asking for the PID, not just PING, proves that the answer comes
        # from our process and not from another one on the same port;
        # a server still loading its snapshot answers with an error.
        try:
            reply = self.call("INFO", "server")
        except OSError:
            return False
        return f"process_id:{pid}\r\n".encode() in reply


# -- PostgreSQL -------------------------------------------------------------


def _version_key(path: Path) -> tuple[int, ...]:
    parts = path.parent.name.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


def _pg_bindir() -> Path:
    """Directory holding ``postgres`` and ``initdb``.

    Debian keeps them out of PATH, in /usr/lib/postgresql/VERSION/bin.
    """
    candidates: list[Path] = []
    if override := os.environ.get("DELAYQ_PG_BINDIR"):
        candidates.append(Path(override))
    if pg_config := shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True
            ).stdout.strip()
            candidates.append(Path(out))
    candidates += sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True
    )
    if on_path := shutil.which("postgres"):
        candidates.append(Path(on_path).parent)
    for candidate in candidates:
        if (candidate / "postgres").is_file() and (candidate / "initdb").is_file():
            return candidate
    raise ServerError(
        "PostgreSQL server binaries (postgres, initdb) not found: install them "
        "with `apt-get install postgresql` (tools/bootstrap.sh does) or set "
        "DELAYQ_PG_BINDIR"
    )


class PostgresServer(_Server):
    """A private PostgreSQL cluster on 127.0.0.1, tuned for speed over safety.

    The cluster is created by ``initdb`` on the first start (about a second)
    and trusts every local connection as the superuser ``postgres``. As
    root, the server runs as the ``postgres`` system user, since PostgreSQL
    refuses to run as root.

    ``kill()`` is an immediate shutdown (SIGQUIT): no checkpoint, crash
    recovery on the next start, like a crash; unlike a SIGKILL of the
    postmaster it also takes the backends down, so a restart finds no
    leftovers. ``die_with_parent`` is as for :class:`RedisServer`.
    """

    name = "postgres"
    user = "postgres"
    start_timeout = 30.0  # crash recovery after kill() can take a while
    stop_steps: Escalation = (
        (signal.SIGINT, 30.0),  # "fast" shutdown: roll back, checkpoint, exit
        (signal.SIGQUIT, 10.0),
        (signal.SIGKILL, 5.0),
    )
    kill_steps: Escalation = ((signal.SIGQUIT, 10.0), (signal.SIGKILL, 5.0))

    def __init__(
        self,
        port: int | None = None,
        *,
        data_dir: Path | None = None,
        dbname: str = "postgres",
        extra_args: Sequence[str] = (),
        die_with_parent: bool = True,
    ) -> None:
        super().__init__(port, data_dir, die_with_parent)
        self.dbname = dbname
        self.extra_args = list(extra_args)
        self._bindir: Path | None = None

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@{LOOPBACK}:{self.port}/{self.dbname}"

    @property
    def log_path(self) -> Path:
        return self.dir / "postgres.log"

    @property
    def bindir(self) -> Path:
        if self._bindir is None:
            self._bindir = _pg_bindir()
        return self._bindir

    def django_settings(self) -> dict[str, Any]:
        """A ``DATABASES`` entry for this server."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": self.dbname,
            "USER": self.user,
            "PASSWORD": "",
            "HOST": LOOPBACK,
            "PORT": str(self.port),
        }

    def _user_args(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        try:
            pwd.getpwnam(self.user)
        except KeyError:
            raise ServerError(
                "PostgreSQL refuses to run as root and there is no 'postgres' "
                "user to run it as: `apt-get install postgresql` creates one"
            ) from None
        return [f"--reuid={self.user}", f"--regid={self.user}", "--init-groups"]

    def _as_user(self, argv: list[str]) -> list[str]:
        user_args = self._user_args()
        if not user_args:
            return argv
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise ServerError("setpriv (util-linux) is needed to run as postgres")
        return [setpriv, *user_args, "--", *argv]

    def _prepare(self) -> None:
        data = self.dir / "data"
        (self.dir / "sockets").mkdir(exist_ok=True)
        if os.geteuid() == 0:
            self._user_args()  # fail early, with advice, if the user is missing
            entry = pwd.getpwnam(self.user)
            for path in (self.dir, self.dir / "sockets"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        if (data / "PG_VERSION").exists():
            return
        initdb = self._as_user([
            str(self.bindir / "initdb"),
            "--pgdata", str(data),
            "--username", self.user,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",  # throw-away cluster: no need to wait for the disk
            "--no-instructions",
        ])  # fmt: skip
        result = subprocess.run(
            initdb, cwd=self.dir, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise ServerError(
                f"initdb failed with code {result.returncode} in {self.dir} (as "
                f"root, the postgres user must be able to reach it):\n"
                f"{result.stdout}{result.stderr}"
            )

    def _argv(self) -> list[str]:
        return [
            str(self.bindir / "postgres"),
            "-D", str(self.dir / "data"),
            "-p", str(self.port),
            "-k", str(self.dir / "sockets"),
            "-c", f"listen_addresses={LOOPBACK}",
            # Durability is worthless for a throw-away cluster; speed is not.
            "-c", "fsync=off",
            "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off",
            "-c", "max_connections=200",
            *self.extra_args,
        ]  # fmt: skip

    def _is_ready(self, pid: int) -> bool:
        # The postmaster writes its PID on the first line of postmaster.pid
        # and "ready" on the eighth once it accepts connections; reading it
        # needs no client and cannot be fooled by another server on the port.
        try:
            lines = (self.dir / "data" / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        return len(lines) >= 8 and lines[0] == str(pid) and lines[7].strip() == "ready"

    def _after_first_start(self) -> None:
        if self.dbname == "postgres":
            return
        createdb = [
            str(self.bindir / "createdb"),
            "--host", LOOPBACK,
            "--port", str(self.port),
            "--username", self.user,
            self.dbname,
        ]  # fmt: skip
        result = subprocess.run(createdb, capture_output=True, text=True, check=False)
        if result.returncode != 0 and "already exists" not in result.stderr:
            raise ServerError(f"createdb {self.dbname} failed: {result.stderr}")


# -- command line -----------------------------------------------------------


def _say(message: str) -> None:
    print(f"servers: {message}", file=sys.stderr, flush=True)


def _terminal_reaches_us() -> bool:
    """True if a Ctrl-C at our terminal goes to our whole process group.

    The child shares our group, so it then gets the SIGINT directly and
    forwarding it would deliver it twice.
    """
    try:
        fd = os.open("/dev/tty", os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _run_child(command: list[str], env: dict[str, str]) -> int:
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        if child is None:
            raise KeyboardInterrupt  # not started yet: just give up
        if signum == signal.SIGINT and _terminal_reaches_us():
            return
        child.send_signal(signum)

    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in forwarded}
    try:
        try:
            child = subprocess.Popen(command, env=env)
        except OSError as exc:
            _say(f"cannot run {command[0]}: {exc}")
            return 127
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # Like a shell: death by signal N is exit status 128 + N.
    return 128 - code if code < 0 else code


def _cmd_run(args: argparse.Namespace) -> int:
    command: list[str] = args.command
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        _say("no command given (usage: run [--redis] [--postgres] -- CMD ...)")
        return 2
    env = dict(os.environ)
    with contextlib.ExitStack() as servers:
        if args.redis:
            redis = servers.enter_context(RedisServer(args.redis_port or None))
            env["DELAYQ_REDIS_URL"] = redis.url
            _say(f"redis-server pid {redis.pid} at {redis.url}")
        if args.postgres:
            pg = servers.enter_context(PostgresServer(args.postgres_port or None))
            env["DELAYQ_PG_HOST"] = pg.host
            env["DELAYQ_PG_PORT"] = str(pg.port)
            env["DELAYQ_PG_USER"] = pg.user
            env["DELAYQ_PG_NAME"] = pg.dbname
            _say(f"postgres pid {pg.pid} at {pg.url}")
        code = _run_child(command, env)
        _say("stopping servers")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.servers",
        description="Run private Redis/PostgreSQL servers for development.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser(
        "run",
        help="start servers, run a command with their addresses, stop them",
        description=(
            "Start the requested servers, run COMMAND with DELAYQ_REDIS_URL "
            "and DELAYQ_PG_HOST/PORT/USER/NAME in its environment, stop the "
            "servers when it exits, and exit with its status."
        ),
    )
    run.add_argument("--redis", action="store_true", help="start a redis-server")
    run.add_argument("--postgres", action="store_true", help="start PostgreSQL")
    run.add_argument(
        "--redis-port", type=int, default=0, metavar="N", help="0: any free port"
    )
    run.add_argument(
        "--postgres-port", type=int, default=0, metavar="N", help="0: any free port"
    )
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS]")
    args = parser.parse_args(argv)
    try:
        return _cmd_run(args)
    except ServerError as exc:
        _say(str(exc))
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
