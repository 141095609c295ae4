"""Where a peer keeps its tasks, as the harness measures it: Redis or PostgreSQL.

The session (:mod:`benchmarks.peers.session`) needs four things of the store
under test: empty it between steps, count the operations it serves (the idle
cost), read how many bytes the peer's tasks take, and say what it is. A
Redis peer gets a fresh redis-server; a PostgreSQL peer a fresh database.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import redis


class Store(ABC):
    """The measured store of one run."""

    #: "redis" or "postgres": which result keys the figures go under.
    kind = ""
    #: What ``operations()`` counts, for the report.
    unit = ""

    def __init__(self, url: str) -> None:
        self.url = url

    @abstractmethod
    def flush(self) -> None:
        """Remove every task (the peer's workers are stopped, or idle)."""

    @abstractmethod
    def operations(self) -> int:
        """A running count of what the store has served; one call adds one."""

    @abstractmethod
    def used_bytes(self) -> int:
        """The bytes the peer's data takes now."""

    @abstractmethod
    def version(self) -> str:
        """The server's name and version."""

    @abstractmethod
    def close(self) -> None:
        """Release the harness's connection."""


class RedisStore(Store):
    """A private redis-server: FLUSHALL, INFO commands and used_memory."""

    kind = "redis"
    unit = "cmds"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.client = redis.Redis.from_url(url)

    def flush(self) -> None:
        self.client.flushall()

    def operations(self) -> int:
        # Commands run inside Lua scripts count too; our INFO counts one.
        return int(self.client.info("stats")["total_commands_processed"])

    def used_bytes(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def version(self) -> str:
        return f"Redis {self.client.info('server')['redis_version']}"

    def close(self) -> None:
        self.client.close()


class PostgresStore(Store):
    """A fresh database of its own: the peer's tables, and the database's
    transaction counters.

    ``operations()`` counts transactions (``xact_commit + xact_rollback`` in
    ``pg_stat_database``), not statements: statement counts need
    pg_stat_statements preloaded, which the shared server does not have.
    Backends report their counters when a transaction ends at most once a
    second, and an idle backend up to 10 s later, so idle figures taken over
    a few seconds are rough.
    """

    kind = "postgres"
    unit = "xacts"

    def __init__(self, url: str, tables: Sequence[str]) -> None:
        super().__init__(url)
        import psycopg

        self.tables = list(tables)
        self.conn = psycopg.connect(url, autocommit=True)

    def flush(self) -> None:
        names = ", ".join(f'"{table}"' for table in self.tables)
        self.conn.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")

    def operations(self) -> int:
        # Each autocommit SELECT is a transaction of its own: one, as for Redis.
        row = self.conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        return int(row[0])

    def used_bytes(self) -> int:
        # Tables, their indexes and TOAST; what the tasks themselves take.
        row = self.conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(quote_ident(name))), 0) "
            "FROM unnest(%s::text[]) AS name",
            [self.tables],
        ).fetchone()
        assert row is not None
        return int(row[0])

    def version(self) -> str:
        row = self.conn.execute("SHOW server_version").fetchone()
        assert row is not None
        return f"PostgreSQL {str(row[0]).split()[0]}"

    def close(self) -> None:
        self.conn.close()


def create_database(admin_url: str, name: str) -> str:
    """Create the empty database ``name`` (dropping any leftover); return its URL."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


def drop_database(admin_url: str, name: str) -> None:
    """Drop ``name``, ending the sessions still on it (workers already stopped)."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
