"""A private MariaDB server on 127.0.0.1."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.procs import LOOPBACK
from tools.servers.base import Server, ServerError, system_user_as_root


def mariadb_binary(name: str) -> str:
    """The path of a MariaDB program (``mariadbd``, ``mariadb-install-db``,
    ``mariadb``); Debian keeps the server in /usr/sbin."""
    for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if candidate and Path(candidate).is_file():
            return candidate
    raise ServerError(
        f"{name} not found: install MariaDB with `apt-get install mariadb-server` "
        "(tools/bootstrap.sh does)"
    )


class MariaDBServer(Server):
    """A private MariaDB server on 127.0.0.1, tuned for speed over safety.

    The data directory is created by ``mariadb-install-db`` on the first
    start; a user ``delayq`` with every privilege (the test runner creates
    and drops its test databases) connects over TCP without a password. As
    root the server runs as the ``mysql`` system user that Debian's package
    creates, like PostgreSQL as ``postgres``.

    The settings are the ones a shop runs with, where they matter to us: the
    default isolation level (REPEATABLE READ), the default collation of the
    server (utf8mb4, case- and accent-insensitive), InnoDB. Only durability
    is traded for speed (no flush at each commit).

    ``kill()`` is a SIGKILL: crash recovery on the next start, like a crash.
    """

    name = "mariadb"
    user = "delayq"
    system_user = "mysql"
    start_timeout = 60.0  # crash recovery after kill() can take a while
    stop_signal = signal.SIGTERM
    grace = 30.0
    kill_signal = signal.SIGKILL
    port_taken_marker = "Address already in use"

    def __init__(
        self,
        port: int | None = None,
        *,
        data_dir: Path | None = None,
        dbname: str = "delayq",
        extra_args: Sequence[str] = (),
        die_with_parent: bool = True,
    ) -> None:
        super().__init__(port, data_dir, die_with_parent)
        self.dbname = dbname
        self.extra_args = list(extra_args)

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def url(self) -> str:
        return f"mysql://{self.user}@{LOOPBACK}:{self.port}/{self.dbname}"

    @property
    def log_path(self) -> Path:
        return self.dir / "mariadb.log"

    @property
    def socket_path(self) -> Path:
        return self.dir / "mariadb.sock"

    def django_settings(self) -> dict[str, Any]:
        """A ``DATABASES`` entry for this server."""
        return {
            "ENGINE": "django.db.backends.mysql",
            "NAME": self.dbname,
            "USER": self.user,
            "PASSWORD": "",
            "HOST": LOOPBACK,
            "PORT": str(self.port),
            "OPTIONS": {"charset": "utf8mb4"},
        }

    def connect(self, database: str | None = None, *, autocommit: bool = True) -> Any:
        """A MySQLdb connection as :attr:`user`, in ``utf8mb4``, to
        ``database`` (or none), reading identifiers quoted the standard way
        (``"key"``, ``ANSI_QUOTES``): SQL a test writes once for every
        database."""
        import MySQLdb

        return MySQLdb.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            charset="utf8mb4",
            autocommit=autocommit,
            init_command="SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')",
            **({"database": database} if database else {}),
        )

    def _user(self) -> str | None:
        return system_user_as_root(self.system_user, "MariaDB is not run as root here")

    def _prepare(self) -> None:
        data = self.dir / "data"
        user = self._user()
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        if (data / "mysql").is_dir():
            return
        install = [
            mariadb_binary("mariadb-install-db"),
            "--no-defaults",
            f"--datadir={data}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
            *([f"--user={user}"] if user else []),
        ]
        result = subprocess.run(
            install, cwd=self.dir, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise ServerError(
                f"mariadb-install-db failed with code {result.returncode} in "
                f"{self.dir}:\n{result.stdout}{result.stderr}"
            )

    def _argv(self) -> list[str]:
        return [
            mariadb_binary("mariadbd"),
            "--no-defaults",
            f"--datadir={self.dir / 'data'}",
            f"--socket={self.socket_path}",
            f"--pid-file={self.dir / 'mariadb.pid'}",
            f"--log-error={self.log_path}",
            f"--bind-address={LOOPBACK}",
            f"--port={self.port}",
            "--skip-name-resolve",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            "--max-connections=300",
            # Durability is worthless for a throw-away server; speed is not.
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-doublewrite=0",
            "--sync-binlog=0",
            "--innodb-buffer-pool-size=256M",
            "--innodb-log-file-size=256M",
            *self.extra_args,
        ]

    def _is_ready(self, pid: int) -> bool:
        # The server writes "ready for connections" once it listens; the
        # line from an earlier start of the same directory is older than
        # this process, whose pid file is written before it.
        try:
            pid_text = (self.dir / "mariadb.pid").read_text().strip()
            log = self.log_path.read_text(errors="replace")
        except OSError:
            return False
        if pid_text != str(pid):
            return False
        return log.rfind("ready for connections") > log.rfind(
            "Starting MariaDB"
        ) and bool(self.socket_path.exists())

    def _after_first_start(self) -> None:
        self.execute_as_root(
            f"CREATE USER IF NOT EXISTS '{self.user}'@'{LOOPBACK}';"
            f"GRANT ALL PRIVILEGES ON *.* TO '{self.user}'@'{LOOPBACK}' "
            "WITH GRANT OPTION;"
            f"CREATE DATABASE IF NOT EXISTS `{self.dbname}` "
            "CHARACTER SET utf8mb4;"
        )

    def execute_as_root(self, sql: str) -> str:
        """Run ``sql`` with the ``mariadb`` client as the server's root user
        (over its socket); return what it printed."""
        result = subprocess.run(
            [
                mariadb_binary("mariadb"),
                "--no-defaults",
                f"--socket={self.socket_path}",
                "--user=root",
                "--batch",
                "--execute",
                sql,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ServerError(f"mariadb client failed: {result.stderr.strip()}")
        return result.stdout
