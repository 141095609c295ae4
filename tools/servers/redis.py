"""A private ``redis-server`` on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis

from tools.procs import LOOPBACK, wait_for
from tools.servers.base import Server, ServerError


def redis_binary() -> str:
    """The ``redis-server`` to run: the first on PATH, else Debian's."""
    found = shutil.which("redis-server")
    if found is None and os.access("/usr/bin/redis-server", os.X_OK):
        found = "/usr/bin/redis-server"
    if found is None:
        raise ServerError(
            "redis-server not found: install it with "
            "`apt-get install redis-server` (tools/bootstrap.sh does)"
        )
    return found


def wait_for_redis(condition: Callable[[], object], seconds: float, what: str) -> None:
    """:func:`~tools.procs.wait_for`, a Redis error counting as "not yet" (a
    node still starting, failing over or frozen on purpose)."""
    wait_for(condition, seconds, what, poll=0.1, ignoring=(redis.RedisError,))


class RedisServer(Server):
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

    def client(self, timeout: float = 1.0) -> redis.Redis:
        """A client for a quick look; close it (``with server.client() as c``)."""
        return redis.Redis(
            LOOPBACK,
            self.port,
            password=self._requirepass(),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )

    def ping(self) -> bool:
        """True if something answers PING on our port."""
        try:
            with self.client() as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def call(self, *args: str) -> Any:
        """Run one command (``call("SAVE")``) and return its reply."""
        with self.client() as client:
            return client.execute_command(*args)

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
            redis_binary(),
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
        # from our process and not from another one on the same port.
        try:
            with self.client() as client:
                return bool(client.info("server").get("process_id") == pid)
        except redis.RedisError:
            return False
