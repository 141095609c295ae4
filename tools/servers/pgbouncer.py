"""A private PgBouncer on 127.0.0.1, in front of a private PostgreSQL."""

from __future__ import annotations

import csv
import os
import pwd
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tools.procs import LOOPBACK
from tools.servers.base import Server, ServerError, system_user_as_root
from tools.servers.postgres import PostgresServer


def pgbouncer_binary() -> str:
    """The ``pgbouncer`` to run: the first on PATH, else Debian's (which
    keeps it in /usr/sbin, out of a normal user's PATH)."""
    for candidate in (shutil.which("pgbouncer"), "/usr/sbin/pgbouncer"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ServerError(
        "pgbouncer not found: install it with `apt-get install pgbouncer` "
        "(tools/bootstrap.sh does)"
    )


class PgBouncerServer(Server):
    """A private PgBouncer on 127.0.0.1 in front of ``backend``, in
    transaction pooling by default: the mode in which a client's
    consecutive transactions may run on different server connections, and
    the one shops choose to serve many clients from a few connections.

    Every database of the backend is reachable through it under its own name
    (a ``*`` entry), as the backend's superuser; clients are trusted without
    a password, as the backend trusts them. The admin console (the database
    ``pgbouncer``) answers ``SHOW POOLS``, ``SHOW CLIENTS`` and the like
    through :meth:`show`.

    ``settings`` adds to or overrides the ``[pgbouncer]`` section (e.g.
    ``{"default_pool_size": "4"}``). As root, PgBouncer runs as the
    ``postgres`` system user (it refuses to run as root), which owns its
    directory.
    """

    name = "pgbouncer"
    #: The system user to run as when we are root (PgBouncer refuses root),
    #: and the database user clients log in as.
    user = "postgres"
    # SIGTERM is PgBouncer's immediate shutdown; SIGINT would wait for the
    # clients' transactions to end, which a test's teardown has no use for.
    stop_signal = signal.SIGTERM
    kill_signal = signal.SIGKILL
    # PgBouncer logs "bind(): Address already in use", then exits.
    port_taken_marker = "Address already in use"

    def __init__(
        self,
        backend: PostgresServer,
        port: int | None = None,
        *,
        pool_mode: str = "transaction",
        settings: Mapping[str, str] | None = None,
        data_dir: Path | None = None,
        die_with_parent: bool = True,
    ) -> None:
        super().__init__(port, data_dir, die_with_parent)
        self.backend = backend
        self.pool_mode = pool_mode
        self.settings = dict(settings or {})

    @property
    def host(self) -> str:
        return LOOPBACK

    def url(self, dbname: str) -> str:
        return f"postgresql://{self.user}@{LOOPBACK}:{self.port}/{dbname}"

    @property
    def log_path(self) -> Path:
        return self.dir / "pgbouncer.log"

    @property
    def ini_path(self) -> Path:
        return self.dir / "pgbouncer.ini"

    @property
    def pid_path(self) -> Path:
        return self.dir / "pgbouncer.pid"

    def django_settings(self, dbname: str) -> dict[str, Any]:
        """A ``DATABASES`` entry for ``dbname`` of the backend, through this
        PgBouncer."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": dbname,
            "USER": self.user,
            "PASSWORD": "",
            "HOST": LOOPBACK,
            "PORT": str(self.port),
        }

    def show(self, what: str) -> list[dict[str, str]]:
        """``SHOW <what>`` on the admin console (``POOLS``, ``CLIENTS``,
        ``SERVERS``, ``STATS``...), one dict per row, values as text.

        Through ``psql``: the console speaks only the simple query protocol,
        and the tools need no PostgreSQL driver of their own.
        """
        argv = [
            str(self.backend.bindir / "psql"),
            "--host", LOOPBACK,
            "--port", str(self.port),
            "--username", self.user,
            "--no-psqlrc",
            "--csv",
            "--command", f"SHOW {what}",
            "pgbouncer",
        ]  # fmt: skip
        result = subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=10
        )
        if result.returncode != 0:
            raise ServerError(f"SHOW {what} on {self!r} failed: {result.stderr}")
        return list(csv.DictReader(result.stdout.splitlines()))

    # -- internals ----------------------------------------------------------

    def _user(self) -> str | None:
        return system_user_as_root(self.user, "PgBouncer refuses to run as root")

    def _ini(self) -> str:
        backend = (
            f"host={self.backend.host} port={self.backend.port} "
            f"user={self.backend.user}"
        )
        options = {
            "listen_addr": LOOPBACK,
            "listen_port": str(self.port),
            "unix_socket_dir": "",  # TCP only: nothing of ours in /tmp
            "pidfile": str(self.pid_path),
            # No logfile: the log goes to stderr, which tools.procs appends
            # to log_path across restarts.
            "auth_type": "trust",
            "auth_file": str(self.dir / "userlist.txt"),
            "admin_users": self.user,
            "pool_mode": self.pool_mode,
            # Room for a test's processes and their threads; a test that
            # measures the pool sets its own.
            "max_client_conn": "200",
            "default_pool_size": "20",
            **self.settings,
        }
        lines = ["[databases]", f"* = {backend}", "", "[pgbouncer]"]
        lines += [f"{key} = {value}" for key, value in options.items()]
        return "\n".join(lines) + "\n"

    def _prepare(self) -> None:
        self.ini_path.write_text(self._ini())
        # With auth_type trust a user must still be listed, with any password.
        (self.dir / "userlist.txt").write_text(f'"{self.user}" ""\n')
        user = self._user()
        if user is not None:
            entry = pwd.getpwnam(user)
            for path in (self.dir, self.ini_path, self.dir / "userlist.txt"):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def _argv(self) -> list[str]:
        return [pgbouncer_binary(), str(self.ini_path)]

    def _is_ready(self, pid: int) -> bool:
        # PgBouncer writes its pidfile once it listens (one that cannot bind
        # exits before), and removes it when it exits: our PID in it proves
        # that this very process accepts connections.
        try:
            return self.pid_path.read_text().strip() == str(pid)
        except OSError:
            return False
