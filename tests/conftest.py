"""Real servers for the suite: a private redis-server, and PostgreSQL or
MariaDB when ``DELAYQ_TEST_DB=postgres`` or ``mariadb``. They listen on free
loopback ports and are stopped when the session ends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import override_settings
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis.database import DirectoryBasedExampleDatabase

from django_delayq.store import connection
from tools.servers import MariaDBServer, PostgresServer, RedisServer

# Property tests: no per-example deadline (a database write on a busy CI
# machine is not a bug), examples remembered with the other caches under
# .venv/, and fixtures shared across a test's examples on purpose (each
# example cleans up what it wrote).
hypothesis_settings.register_profile(
    "delayq",
    deadline=None,
    database=DirectoryBasedExampleDatabase(".venv/hypothesis"),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
hypothesis_settings.load_profile("delayq")


def delayq_settings(url: str, **extra: Any) -> dict[str, Any]:
    """The suite's DELAYQ on the Redis at ``url`` (see tests/settings.py)."""
    queues = {"orders": {"shards": 4}, "reports": {}}
    return {"REDIS_URL": url, "QUEUES": queues, "TEST_KEY_PREFIX": "delayq", **extra}


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    override = override_settings(DELAYQ=delayq_settings(server.url))
    override.enable()
    try:
        yield server
    finally:
        override.disable()
        server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer | None]:
    if settings.TEST_DB != "postgres":
        yield None
        return
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDBServer | None]:
    if settings.TEST_DB != "mariadb":
        yield None
        return
    server = MariaDBServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    postgres_server: PostgresServer | None, mariadb_server: MariaDBServer | None
) -> None:
    """Point the databases at the private server (pytest-django hook)."""
    server = postgres_server or mariadb_server
    if server is not None:
        for alias in ("default", "replica"):
            settings.DATABASES[alias].update(HOST=server.host, PORT=str(server.port))


@pytest.fixture(scope="session", autouse=True)
def _json_support_known(django_db_setup: None, django_db_blocker: Any) -> None:
    """Read once, while allowed, whether each SQLite database supports JSON.

    Django 6's system checks ask every database alias, also those a test did
    not ask for (the router tests' ``replica``), and SQLite answers with a
    query, which such a test forbids: ``checks.run_checks()`` would then fail
    in every test that runs before the first test that asks for it.
    """
    from django.db import connections

    with django_db_blocker.unblock():
        for connection in connections.all():
            if connection.vendor == "sqlite":
                assert connection.features.supports_json_field


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A raw client on the suite's Redis, emptied before each test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def private_redis(settings: Any) -> Iterator[RedisServer]:
    """A redis-server of the test's own, which the test may stop or kill."""
    server = RedisServer()
    server.start()
    settings.DELAYQ = delayq_settings(server.url)
    try:
        yield server
    finally:
        server.stop()
        connection.reset()
