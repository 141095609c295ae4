"""The database going away while workers complete tasks (PostgreSQL or
MariaDB): its connections terminated, or the server restarted. Once it is
back everything drains, with nothing lost and no duplicate effect."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.conf import settings
from django.db import OperationalError, connection, connections

from tests.faults.harness import Rig, schedule_records
from tests.faults.invariants import Expect, check
from tests.testapp.models import Ledger
from tools.procs import wait_for
from tools.servers import MariaDBServer, PostgresServer

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]

TASKS = 300


@pytest.fixture
def db_server(
    postgres_server: PostgresServer | None, mariadb_server: MariaDBServer | None
) -> PostgresServer | MariaDBServer:
    server = postgres_server or mariadb_server
    if server is None:
        pytest.skip(
            f"needs a database server (DELAYQ_TEST_DB={settings.TEST_DB}): the "
            "SQLite test database is a file every process opens itself, it "
            "cannot go away"
        )
    return server


def terminate_backends() -> int:
    """End every other session on the test database, as an admin would."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(
                "SELECT ID FROM information_schema.PROCESSLIST "
                "WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"
            )
            ended = 0
            for (session,) in cursor.fetchall():
                try:
                    cursor.execute("KILL CONNECTION %s", [session])
                    ended += 1
                except OperationalError:
                    pass  # it ended meanwhile (1094: unknown thread id)
            return ended
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        row: Any = cursor.fetchone()
        return int(row[0])


def reconnect(seconds: float = 30) -> None:
    """Wait until this process can query the database again."""

    def up() -> bool:
        try:
            connection.ensure_connection()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return True
        except OperationalError:
            connections.close_all()
            return False

    wait_for(up, seconds, "the database accepts connections again", poll=0.2)


def test_backends_terminated_while_workers_complete_tasks(
    rig: Rig, db_server: PostgresServer | MariaDBServer
) -> None:
    procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(*procs)
    batch = schedule_records("db", TASKS, delay=lambda i: 0.5 + i * 0.01, seconds=0.02)
    wait_for(lambda: Ledger.objects.count() >= TASKS // 4, 60, "a quarter has run")
    terminated = terminate_backends()
    left = TASKS - Ledger.objects.count()
    time.sleep(1.0)
    terminated += terminate_backends()
    assert terminated, "no session to terminate"
    assert left > 0, "the fault did not hit mid-drain"

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        max_extra=2 * 4,  # per round, what 2 workers x 2 threads held
        max_lateness=30.0,
    )
    check(
        rig,
        "database sessions terminated during completion (2 rounds)",
        expect,
        notes=f"{terminated} sessions terminated, {left} tasks left at the first",
    )


def test_database_restarted_while_workers_complete_tasks(
    rig: Rig, db_server: PostgresServer | MariaDBServer
) -> None:
    procs = [rig.sweeper(), rig.dispatcher(), rig.worker(), rig.worker()]
    rig.wait_ready(*procs)
    batch = schedule_records("db", TASKS, delay=lambda i: 0.5 + i * 0.01, seconds=0.02)
    wait_for(lambda: Ledger.objects.count() >= TASKS // 4, 60, "a quarter has run")
    connections.close_all()  # ours would break with the server
    down = time.monotonic()
    db_server.stop()
    time.sleep(2.0)
    db_server.start()
    down = time.monotonic() - down
    reconnect()
    left = TASKS - Ledger.objects.count()
    assert left > 0, "the fault did not hit mid-drain"

    expect = Expect(
        committed=batch.keys,
        rolled_back=batch.rolled_back,
        max_extra=4,  # what 2 workers x 2 threads held
        max_lateness=down + 30.0,
    )
    check(
        rig,
        f"{db_server.name} restarted during completion",
        expect,
        notes=f"down {down:.1f} s, {left} tasks left after",
    )
