"""Private Redis, PostgreSQL and MariaDB servers on free loopback ports.

The test suite, the fault tests, ``make example`` and the benchmarks need
throw-away servers that never touch a system-wide instance: every server here
listens on 127.0.0.1 only, on a port of its own, with its files in a temporary
directory, and is stopped by its PID (through :mod:`tools.procs`).

Library use::

    with RedisServer() as redis, PostgresServer() as pg:
        ...  # redis.url, pg.django_settings()

Command line (the servers live exactly as long as the command)::

    python -m tools.servers run --redis --postgres -- pytest -x

Needs mirakuru and redis-py, which the test and benchmark environments have;
the Redis Cluster and Sentinel set-ups are in :mod:`tools.servers.cluster`
and :mod:`tools.servers.sentinel`.
"""

from tools.procs import LOOPBACK, free_port, wait_for
from tools.servers.base import ServerError, Started
from tools.servers.mariadb import MariaDBServer, mariadb_binary
from tools.servers.pgbouncer import PgBouncerServer, pgbouncer_binary
from tools.servers.postgres import PostgresServer, pg_bindir
from tools.servers.redis import RedisServer, redis_binary

__all__ = [
    "LOOPBACK",
    "MariaDBServer",
    "PgBouncerServer",
    "PostgresServer",
    "RedisServer",
    "ServerError",
    "Started",
    "free_port",
    "mariadb_binary",
    "pg_bindir",
    "pgbouncer_binary",
    "redis_binary",
    "wait_for",
]
