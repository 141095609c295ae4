"""A private PostgreSQL cluster on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.procs import LOOPBACK, run_as
from tools.servers.base import Server, ServerError, system_user_as_root


def _version_key(path: Path) -> tuple[int, ...]:
    parts = path.parent.name.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


def pg_bindir() -> Path:
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


class PostgresServer(Server):
    """A private PostgreSQL cluster on 127.0.0.1, tuned for speed over safety.

    The cluster is created by ``initdb`` on the first start (about a second)
    and trusts every local connection as the superuser ``postgres``. As
    root, the server runs as the ``postgres`` system user, since PostgreSQL
    refuses to run as root (the one user switch in tools/).

    ``kill()`` is an immediate shutdown (SIGQUIT): no checkpoint, crash
    recovery on the next start, like a crash; unlike a SIGKILL of the
    postmaster it also takes the backends down, so a restart finds no
    leftovers. ``die_with_parent`` is as for :class:`RedisServer`.
    """

    name = "postgres"
    user = "postgres"
    start_timeout = 30.0  # crash recovery after kill() can take a while
    # "Fast" shutdown: roll back, checkpoint, exit.
    stop_signal = signal.SIGINT
    grace = 30.0
    kill_signal = signal.SIGQUIT

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
            self._bindir = pg_bindir()
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

    def _user(self) -> str | None:
        return system_user_as_root(self.user, "PostgreSQL refuses to run as root")

    def _prepare(self) -> None:
        data = self.dir / "data"
        (self.dir / "sockets").mkdir(exist_ok=True)
        user = self._user()  # fails early, with advice, if the user is missing
        if user is not None:
            entry = pwd.getpwnam(self.user)
            for path in (self.dir, self.dir / "sockets"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        if (data / "PG_VERSION").exists():
            return
        initdb = [
            str(self.bindir / "initdb"),
            "--pgdata", str(data),
            "--username", self.user,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",  # throw-away cluster: no need to wait for the disk
            "--no-instructions",
        ]  # fmt: skip
        result = subprocess.run(
            initdb,
            cwd=self.dir,
            capture_output=True,
            text=True,
            check=False,
            **(run_as(user) if user else {}),
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
