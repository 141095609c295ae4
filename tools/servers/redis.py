"""A private ``redis-server`` on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis

from tools.procs import LOOPBACK, free_port, wait_for
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


@dataclass(frozen=True)
class TlsFiles:
    """A throwaway certificate authority and what it signed, as PEM files:
    a certificate for the servers on 127.0.0.1 (which they also present as
    clients: replicas to their primary, sentinels to the servers and to
    each other), and one for the clients."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    @classmethod
    def generate(cls, directory: Path) -> TlsFiles:
        """Make a CA and the two certificates in ``directory`` with the
        ``openssl`` command, valid for a day."""
        openssl = shutil.which("openssl")
        if openssl is None:
            raise ServerError(
                "openssl not found: install it with `apt-get install openssl`"
            )
        directory.mkdir(parents=True, exist_ok=True)
        files = cls(
            ca=directory / "ca.pem",
            server_cert=directory / "server.pem",
            server_key=directory / "server.key",
            client_cert=directory / "client.pem",
            client_key=directory / "client.key",
        )
        ca_key = directory / "ca.key"
        key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

        def run(*args: str) -> None:
            done = subprocess.run(
                [openssl, *args], cwd=directory, capture_output=True, text=True
            )
            if done.returncode != 0:
                raise ServerError(f"openssl {args[0]} failed: {done.stderr.strip()}")

        run(
            "req", "-x509", *key, "-keyout", str(ca_key), "-out", str(files.ca),
            "-days", "1", "-subj", "/CN=django-delayq test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        for cert, private, name, usage, alt in (
            (files.server_cert, files.server_key, "127.0.0.1",
             "serverAuth,clientAuth", "IP:127.0.0.1,DNS:localhost"),
            (files.client_cert, files.client_key, "django-delayq client",
             "clientAuth", None),
        ):  # fmt: skip
            request = cert.with_suffix(".csr")
            extensions = cert.with_suffix(".ext")
            extensions.write_text(
                "basicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyAgreement\n"
                f"extendedKeyUsage={usage}\n"
                "subjectKeyIdentifier=hash\n"
                "authorityKeyIdentifier=keyid,issuer\n"
                + (f"subjectAltName={alt}\n" if alt else "")
            )
            run(
                "req", "-new", *key, "-keyout", str(private), "-out", str(request),
                "-subj", f"/CN={name}",
            )  # fmt: skip
            run(
                "x509", "-req", "-in", str(request), "-CA", str(files.ca),
                "-CAkey", str(ca_key), "-CAcreateserial", "-out", str(cert),
                "-days", "1", "-extfile", str(extensions),
            )  # fmt: skip
        return files

    def server_args(self, tls_port: int) -> list[str]:
        """redis-server's arguments for a TLS port beside the plain one,
        clients (replicas, sentinels) asked for a certificate of the CA, and
        replication (and a sentinel's connections) over TLS."""
        return [
            "--tls-port", str(tls_port),
            "--tls-cert-file", str(self.server_cert),
            "--tls-key-file", str(self.server_key),
            "--tls-ca-cert-file", str(self.ca),
            "--tls-auth-clients", "yes",
            "--tls-replication", "yes",
        ]  # fmt: skip


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

    ``tls`` adds a TLS port (:attr:`tls_port`) beside the plain one, which
    stays open on 127.0.0.1 for :meth:`client`; with ``tls`` a replica's
    ``--replicaof`` names its primary's TLS port, and the server announces
    its TLS port to its primary and to sentinels (:attr:`announced_port`).

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
        tls: TlsFiles | None = None,
        die_with_parent: bool = True,
    ) -> None:
        if save and not persistence:
            raise ValueError("save= only applies with persistence=True")
        super().__init__(port, data_dir, die_with_parent)
        self.extra_args = list(extra_args)
        self.persistence = persistence
        self.save = save
        self.password = password
        self.tls = tls
        self.tls_port: int | None = free_port() if tls is not None else None

    @property
    def announced_port(self) -> int:
        """The port replicas and sentinels reach this server on: the TLS
        one if any."""
        return self.tls_port if self.tls_port is not None else self.port

    def _choose_ports(self) -> None:
        super()._choose_ports()
        if self.tls is not None:
            self.tls_port = free_port()

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
            *self._tls_args(),
            *self.extra_args,
        ]  # fmt: skip

    def _tls_args(self) -> list[str]:
        if self.tls is None or self.tls_port is None:
            return []
        return self.tls.server_args(self.tls_port)

    def _is_ready(self, pid: int) -> bool:
        # Asking for the PID, not just PING, proves that the answer comes
        # from our process and not from another one on the same port.
        try:
            with self.client() as client:
                return bool(client.info("server").get("process_id") == pid)
        except redis.RedisError:
            return False
