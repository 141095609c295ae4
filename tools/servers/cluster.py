"""A private Redis Cluster on loopback, for the cluster tests.

Three primaries and three replicas, each a real ``redis-server`` with
``--cluster-enabled yes`` on a port of its own, joined with
``redis-cli --cluster create``, and stopped by its PID like every server in
:mod:`tools.servers`. A node is declared failing after one second without an
answer, so a replica takes over a killed primary within a few seconds::

    with RedisCluster() as cluster:
        DELAYQ = {"REDIS_URL": cluster.url, "REDIS_CLUSTER": True}
        old = cluster.kill_primary_of(b"delayq:{default:0}:due")
        cluster.wait_for_failover(old)      # its replica serves the slot now

Written here, not taken from a library: no process library knows how to join
nodes into a cluster, fail one over or move a slot.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, Self

import redis
from redis.cluster import key_slot

from tools.procs import LOOPBACK, free_port
from tools.servers.base import ServerError, Started
from tools.servers.redis import RedisServer, redis_binary, wait_for_redis

#: How long a node may go without answering before the others fail it over.
NODE_TIMEOUT_MS = 1000


class ClusterNode(RedisServer):
    """``redis-server --cluster-enabled yes``; its ``nodes.conf`` survives a
    restart, so a restarted node rejoins the cluster as the same node."""

    name = "cluster-node"

    def __init__(self) -> None:
        options = {
            "--cluster-enabled": "yes",
            "--cluster-config-file": "nodes.conf",
            "--cluster-node-timeout": str(NODE_TIMEOUT_MS),
            # A replica whose link to its primary broke long ago may still
            # take over: these tests kill primaries on purpose.
            "--cluster-replica-validity-factor": "0",
            # While a slot has no primary the other slots keep answering, as
            # docs/guide/running.md advises for production.
            "--cluster-require-full-coverage": "no",
        }
        super().__init__(extra_args=[part for pair in options.items() for part in pair])
        # Its own port for the cluster bus: the default, the client port +
        # 10000, may be taken or above 65535.
        self.bus_port = free_port()

    def _argv(self) -> list[str]:
        return [*super()._argv(), "--cluster-port", str(self.bus_port)]

    def _choose_ports(self) -> None:
        # The log does not say which of the two ports was taken.
        super()._choose_ports()
        self.bus_port = free_port()


class RedisCluster(Started):
    """Three primaries with one replica each, started and stopped together."""

    def __init__(self, primaries: int = 3) -> None:
        self.nodes = [ClusterNode() for _ in range(primaries * 2)]
        self.replicas_per_primary = 1

    @property
    def url(self) -> str:
        """A node's URL: the client discovers the others from it."""
        return self.nodes[0].url

    # -- life cycle -----------------------------------------------------------

    def start(self) -> Self:
        try:
            for node in self.nodes:
                node.start()
            self._create()
            self._wait(self._settled, "every node seeing the cluster as ok")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    # -- what tests look at ---------------------------------------------------

    def primary_of(self, key: str | bytes) -> ClusterNode:
        """The node serving ``key``'s slot now."""
        slot = key_slot(key.encode() if isinstance(key, str) else key)
        for node in self._running():
            with self._client(node.port) as client:
                for start, end, *served_by in client.execute_command("CLUSTER SLOTS"):
                    if start <= slot <= end:
                        port = int(served_by[0][1])
                        return next(n for n in self.nodes if n.port == port)
        raise ServerError(f"no node serves slot {slot}")

    def primaries(self) -> list[ClusterNode]:
        """The nodes that are primaries now."""
        found = []
        for node in self._running():
            with self._client(node.port) as client:
                if client.info("replication").get("role") == "master":
                    found.append(node)
        return found

    def replica_of(self, primary: ClusterNode) -> ClusterNode:
        """The replica of ``primary``."""
        with self._client(primary.port) as client:
            info = client.info("replication")
        ports = {int(v["port"]) for k, v in info.items() if k.startswith("slave")}
        for node in self.nodes:
            if node.port in ports:
                return node
        raise ServerError(f"{primary} has no replica")

    # -- faults ------------------------------------------------------------

    def kill_primary_of(self, key: str | bytes) -> ClusterNode:
        """SIGKILL the primary serving ``key``, as a crash would."""
        node = self.primary_of(key)
        node.kill()
        return node

    def wait_for_failover(self, old: ClusterNode, timeout: float = 30.0) -> None:
        """Wait until a replica took over every slot ``old`` served and the
        cluster says ok again."""

        def taken_over() -> bool:
            # The old primary may be alive but frozen (SIGSTOP): not asked.
            for node in self._running():
                if node is old:
                    continue
                with self._client(node.port) as client:
                    if client.cluster("info").get("cluster_state") != "ok":
                        return False
                    for _s, _e, *served_by in client.execute_command("CLUSTER SLOTS"):
                        if int(served_by[0][1]) == old.port:
                            return False
            return True

        self._wait(taken_over, "replica taking over the killed primary", timeout)

    def manual_failover(self, replica: ClusterNode, timeout: float = 30.0) -> None:
        """``CLUSTER FAILOVER`` on ``replica``: a graceful hand-over, in which
        its primary stops taking writes until the replica has caught up."""
        with self._client(replica.port) as client:
            client.execute_command("CLUSTER FAILOVER")

        def promoted() -> bool:
            return self._role(replica) == "master" and self._settled()

        self._wait(promoted, "replica promoted by CLUSTER FAILOVER", timeout)

    def wait_for_rejoin(self, node: ClusterNode, timeout: float = 30.0) -> None:
        """Wait until ``node`` (a failed-over primary, back) serves as a
        replica and every node sees the cluster as ok."""

        def rejoined() -> bool:
            return self._role(node) == "slave" and self._settled()

        self._wait(rejoined, "old primary back as a replica", timeout)

    def move_slot(self, key: str | bytes, target: ClusterNode) -> None:
        """Migrate ``key``'s slot, keys included, to ``target`` the way
        ``redis-cli --cluster reshard`` does: MIGRATING/IMPORTING, MIGRATE
        in batches, then SETSLOT NODE on both sides and on every primary."""
        slot = key_slot(key.encode() if isinstance(key, str) else key)
        source = self.primary_of(key)
        if source is target:
            return
        src, dst = self._client(source.port), self._client(target.port)
        with src, dst:
            source_id = src.execute_command("CLUSTER MYID").decode()
            target_id = dst.execute_command("CLUSTER MYID").decode()
            dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
            src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
            while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
                src.execute_command(
                    "MIGRATE", LOOPBACK, target.port, "", 0, 5000, "KEYS", *keys
                )
            dst.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)
            src.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)
        for node in self.primaries():
            if node not in (source, target):
                with self._client(node.port) as client:
                    client.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)

    # -- internals ----------------------------------------------------------

    def _create(self) -> None:
        # Debian's redis-tools puts redis-cli beside redis-server.
        cli = shutil.which("redis-cli") or str(
            Path(redis_binary()).with_name("redis-cli")
        )
        addresses = [f"{LOOPBACK}:{node.port}" for node in self.nodes]
        done = subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                str(self.replicas_per_primary),
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise ServerError(
                f"redis-cli --cluster create failed ({done.returncode}):\n"
                f"{done.stdout}\n{done.stderr}"
            )

    def _running(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.is_running()]

    def _settled(self) -> bool:
        for node in self.nodes:
            with self._client(node.port) as client:
                info = client.cluster("info")
                if info.get("cluster_state") != "ok":
                    return False
                if int(info.get("cluster_known_nodes", 0)) != len(self.nodes):
                    return False
        return len(self.primaries()) == len(self.nodes) // 2

    def _role(self, node: ClusterNode) -> str:
        with self._client(node.port) as client:
            return str(client.info("replication").get("role"))

    def _client(self, port: int) -> redis.Redis:
        return redis.Redis(LOOPBACK, port, socket_timeout=2.0)

    def _wait(self, condition: Any, what: str, timeout: float = 30.0) -> None:
        wait_for_redis(condition, timeout, f"redis cluster: {what}")
