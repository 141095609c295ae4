"""A private Redis Sentinel set-up on loopback, for the sentinel tests.

One primary, one replica and three sentinels (quorum 2), each a real
``redis-server`` on a port of its own, stopped by its PID like every server
in :mod:`tools.servers`. The sentinels declare a primary down after one
second without an answer, so a failover takes a few seconds::

    with SentinelSet() as sentinels:
        DELAYQ = {"REDIS_SENTINEL": sentinels.settings()}
        sentinels.kill_primary()          # SIGKILL, as a crash would
        sentinels.wait_for_failover()     # the replica is the primary now

With ``password`` every server and sentinel has it as its default user's
(``requirepass``), and the replicas and the sentinels log in with it: a
test adds its own ACL users to them (``ACL SETUSER`` on each, as ACLs are
not replicated). With ``tls`` (:class:`~tools.servers.redis.TlsFiles`)
replication, the sentinels' connections and the addresses they hand out
go over TLS, every TLS client needing a certificate of the CA; each server
keeps a plain port on 127.0.0.1 for the set-up's own look-ups.

Written here, not taken from a library: no process library knows how to set
sentinels on a primary and wait for their failover.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

import redis

from tools.procs import LOOPBACK, NotReached
from tools.servers.base import ServerError, Started
from tools.servers.redis import RedisServer, TlsFiles, redis_binary, wait_for_redis

SERVICE = "mymaster"


class SentinelServer(RedisServer):
    """``redis-server --sentinel`` watching one primary.

    Its configuration file is written once: a sentinel rewrites it with what
    it learns (replicas, other sentinels, the current primary), and a
    restarted sentinel must start from that, as a real one does.
    """

    name = "sentinel"

    def __init__(
        self,
        primary_port: int,
        *,
        quorum: int = 2,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 5000,
        password: str | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        super().__init__(password=password, tls=tls)
        self.primary_port = primary_port
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms

    @property
    def config_path(self) -> Path:
        return self.dir / "sentinel.conf"

    @property
    def log_path(self) -> Path:
        return self.dir / "sentinel.log"

    def _prepare(self) -> None:
        if self.config_path.exists():
            return
        self.config_path.write_text(
            f"port {self.port}\n"
            f"bind {LOOPBACK}\n"
            f"daemonize no\n"
            f"dir {self.dir}\n"
            f"sentinel monitor {SERVICE} {LOOPBACK} {self.primary_port} "
            f"{self.quorum}\n"
            f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}\n"
            f"sentinel failover-timeout {SERVICE} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
            + "".join(f"{line}\n" for line in self._secured())
        )

    def _secured(self) -> list[str]:
        """The configuration lines of the password and of TLS."""
        lines = []
        if self.password:
            # Clients of the sentinel, the other sentinels, and the servers.
            lines += [
                f"requirepass {self.password}",
                f"sentinel sentinel-pass {self.password}",
                f"sentinel auth-pass {SERVICE} {self.password}",
            ]
        if self.tls is not None and self.tls_port is not None:
            args = self.tls.server_args(self.tls_port)
            lines += [
                f"{flag[2:]} {value}"
                for flag, value in zip(args[::2], args[1::2], strict=True)
            ]
        return lines

    def _argv(self) -> list[str]:
        return [redis_binary(), str(self.config_path), "--sentinel"]


class SentinelSet(Started):
    """A primary, a replica and three sentinels, started and stopped together."""

    def __init__(
        self, *, password: str | None = None, tls: TlsFiles | None = None
    ) -> None:
        self.password = password
        self.tls = tls
        # Every server may become a replica (of the one the sentinels promote).
        auth = ["--masterauth", password] if password else []
        first = RedisServer(password=password, tls=tls, extra_args=auth)
        primary = str(first.announced_port)
        self.servers = [
            first,
            RedisServer(
                password=password,
                tls=tls,
                extra_args=[*auth, "--replicaof", LOOPBACK, primary],
            ),
        ]
        self.sentinels = [
            SentinelServer(first.announced_port, password=password, tls=tls)
            for _ in range(3)
        ]

    # -- what clients use ---------------------------------------------------

    @property
    def nodes(self) -> list[str]:
        return [f"{LOOPBACK}:{s.announced_port}" for s in self.sentinels]

    def settings(self) -> dict[str, Any]:
        """``DELAYQ["REDIS_SENTINEL"]`` for this set-up, logged in as the
        default users (with the password), over TLS with the client
        certificate (with ``tls``)."""
        settings: dict[str, Any] = {"SERVICE": SERVICE, "NODES": self.nodes}
        if self.password:
            settings["PASSWORD"] = settings["SENTINEL_PASSWORD"] = self.password
        return {**settings, **self.settings_tls()}

    def settings_tls(self) -> dict[str, Any]:
        """The TLS keys of ``DELAYQ["REDIS_SENTINEL"]`` (none without
        ``tls``): the test CA, and the client certificate."""
        if self.tls is None:
            return {}
        return {
            "SSL": True,
            "SSL_CA_CERTS": str(self.tls.ca),
            "SSL_CERTFILE": str(self.tls.client_cert),
            "SSL_KEYFILE": str(self.tls.client_key),
        }

    # -- life cycle -----------------------------------------------------------

    def start(self) -> Self:
        for server in self.servers:
            server.start()
        self._wait(self._replicating, "the replica in sync with the primary")
        for sentinel in self.sentinels:
            sentinel.start()
        self._wait(self._sentinels_agree, "the sentinels to know each other")
        return self

    def close(self) -> None:
        for server in [*self.sentinels, *self.servers]:
            server.close()

    # -- faults ------------------------------------------------------------

    def primary(self) -> RedisServer:
        """The server the sentinels name as the primary now."""
        return self._server_on(self._primary_port())

    def replica(self) -> RedisServer:
        primary = self.primary()
        return next(s for s in self.servers if s is not primary)

    def kill_primary(self) -> RedisServer:
        """SIGKILL the primary, as a crash would; returns it (stopped)."""
        primary = self.primary()
        primary.kill()
        return primary

    def wait_for_failover(self, old: RedisServer, timeout: float = 30.0) -> None:
        """Wait until the sentinels promoted another server and it accepts
        writes."""

        def promoted() -> bool:
            port = self._primary_port()
            if port == old.announced_port:
                return False
            with self._server_on(port).client() as client:
                info = client.info("replication")
            # Finished on every sentinel, not only under way: while a
            # failover runs, get-master-addr-by-name already names the
            # replica it promotes, and a failover that then aborts leaves
            # the sentinels with the old primary, which comes back as the
            # primary when it restarts.
            return info.get("role") == "master" and self._switched_to(port)

        self._wait(promoted, "a replica promoted", timeout)

    def _switched_to(self, port: int) -> bool:
        """Whether every running sentinel names ``port`` as the primary, with
        no failover in progress."""
        for sentinel in self.sentinels:
            if not sentinel.is_running():
                continue
            with sentinel.client() as client:
                state = client.sentinel_master(SERVICE)
            flags = state["flags"]
            if isinstance(flags, str):  # RESP2 keeps the raw list
                flags = set(flags.split(","))
            if int(state["port"]) != port or "failover_in_progress" in flags:
                return False
        return True

    def wait_for_rejoin(self, server: RedisServer, timeout: float = 30.0) -> None:
        """Wait until ``server`` (an old primary, restarted) is a replica of
        the primary the sentinels name, in sync with it."""

        seen: dict[str, Any] = {}

        def rejoined() -> bool:
            with server.client() as client:
                info = client.info("replication")
            seen["server"] = {
                key: info.get(key)
                for key in ("role", "master_port", "master_link_status")
            }
            seen["sentinels name"] = primary = self._primary_port()
            return (
                info.get("role") == "slave"
                and int(info.get("master_port", 0)) == primary
                and info.get("master_link_status") == "up"
            )

        try:
            self._wait(rejoined, "old primary back as a replica", timeout)
        except NotReached as exc:
            # What the server and the sentinels said last: stuck, or slow.
            raise NotReached(f"{exc}; last seen: {seen}") from exc

    # -- internals ----------------------------------------------------------

    def _server_on(self, port: int) -> RedisServer:
        """The server whose announced port is ``port``."""
        for server in self.servers:
            if server.announced_port == port:
                return server
        raise ServerError(f"the sentinels name an unknown primary on port {port}")

    def _primary_port(self) -> int:
        """The port the sentinels name the primary on (a TLS port with
        ``tls``)."""
        for sentinel in self.sentinels:
            if not sentinel.is_running():
                continue
            try:
                with sentinel.client() as client:
                    _host, port = client.sentinel_get_master_addr_by_name(SERVICE)
                return int(port)
            except (redis.RedisError, TypeError, ValueError):
                continue
        raise ServerError("no sentinel names a primary")

    def _replicating(self) -> bool:
        with self.servers[1].client() as client:
            info = client.info("replication")
        return info.get("master_link_status") == "up"

    def _sentinels_agree(self) -> bool:
        for sentinel in self.sentinels:
            with sentinel.client() as client:
                state = client.sentinel_master(SERVICE)
            if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < 2:
                return False
        return True

    def _wait(self, condition: Any, what: str, timeout: float = 30.0) -> None:
        wait_for_redis(condition, timeout, f"sentinel set-up: {what}")
