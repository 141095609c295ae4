"""The whole flow through PgBouncer in transaction pooling mode.

Many shops put PgBouncer between Django and PostgreSQL; in transaction
pooling a client's consecutive transactions may each run on another server
connection, so nothing that lives in a session survives from one to the
next: server-side cursors (what ``QuerySet.iterator()`` uses on
PostgreSQL), prepared statements, advisory locks, a ``SET`` outside a
transaction, temporary tables, LISTEN. The commands run here as real
processes whose settings (tests/settings_pgbouncer.py) reach the test
database through a private PgBouncer, without
``DISABLE_SERVER_SIDE_CURSORS``, as a shop that never heard of it runs
them. What the shop's web processes do runs in a process of its own too
(``manage.py shell``), through the same PgBouncer.

PgBouncer keeps a few server connections open here (``min_pool_size``) and
hands them out in turn (``server_round_robin``) rather than the last one
freed: on a busy pool a client's next transaction lands on another
connection anyway, and a test with a handful of clients would otherwise
rarely show it (a lone client would always get the same one back).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.utils import timezone

from django_delayq import schedule
from django_delayq.models import DelayedTask, OutboxEntry, Status
from tests.acceptance.processes import Processes
from tests.support.helpers import due_key, due_members
from tests.testapp.models import Ledger, Order
from tests.testapp.tasks import add
from tools.procs import LOOPBACK, ROOT, NotReached, free_port, wait_for
from tools.servers import PgBouncerServer, PostgresServer, RedisServer

pytestmark = [
    pytest.mark.skipif(
        settings.TEST_DB != "postgres",
        reason="PgBouncer pools PostgreSQL connections: run with "
        "DELAYQ_TEST_DB=postgres",
    ),
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(90),
]

#: What a database error through PgBouncer looks like in a log: a server-side
#: cursor or prepared statement looked for on another server connection, a
#: driver error, a connection PgBouncer closed.
DATABASE_TROUBLE = re.compile(
    r"does not exist|prepared statement|psycopg|DatabaseError|OperationalError|"
    r"InterfaceError|ProgrammingError|InternalError|server closed",
    re.IGNORECASE,
)
#: What PgBouncer logs when a client or server did something it cannot pool.
PGBOUNCER_TROUBLE = re.compile(r" (ERROR|WARNING|FATAL) ")


# -- what the shop's web processes do (run in a process of their own) ---------


def shop_day(orders: int) -> None:
    """Schedule, deduplicate, cancel and reschedule as a shop's views do,
    one transaction each; print what was refused, as JSON."""
    from django.db import transaction

    from django_delayq import cancel, reschedule, schedule
    from django_delayq.exceptions import DuplicateTask
    from tests.testapp.tasks import always_fails, create_order, fails_once, record

    later = 60.0  # cancelled or rescheduled before they are due
    for i in range(orders):
        with transaction.atomic():
            delay = later if i < 60 or i == 80 else (i % 16) / 10
            schedule(record, args=[f"order-{i}"], key=f"order-{i}", delay=delay)
    refused = []
    try:
        schedule(record, args=["order-45 again"], key="order-45")
    except DuplicateTask as exc:
        refused.append(exc.key)
    # The replacement runs, the task it replaces does not.
    schedule(record, args=["order-80 replaced"], key="order-80", replace=True)
    for i in range(30):
        with transaction.atomic():
            assert cancel(key=f"order-{i}")
    for i in range(30, 60):
        with transaction.atomic():
            reschedule(key=f"order-{i}", delay=0.5)
    for i in range(20):
        with transaction.atomic():
            schedule(create_order, args=[f"pgbouncer-{i}"])
    for i in range(10):
        schedule(fails_once, args=[f"retry-{i}"])
    schedule(always_fails, args=["fails for good"])
    print(json.dumps({"refused": refused}))


def outbox_orders(count: int) -> None:
    """Schedule while Redis is down: each task goes to the outbox."""
    from django.db import transaction

    from django_delayq import schedule
    from tests.testapp.tasks import record

    for i in range(count):
        with transaction.atomic():
            schedule(record, args=[f"outbox-{i}"], key=f"outbox-{i}")


def far_orders(count: int) -> None:
    """Schedule ``count`` tasks due in five minutes, in one bulk write."""
    from django_delayq import Call, schedule_many
    from tests.testapp.tasks import record

    schedule_many(
        Call(record, args=[f"far-{i}"], key=f"far-{i}", delay=300.0)
        for i in range(count)
    )


# -- fixtures ------------------------------------------------------------------


@pytest.fixture
def pgbouncer(postgres_server: PostgresServer | None) -> Iterator[PgBouncerServer]:
    assert postgres_server is not None  # DELAYQ_TEST_DB=postgres starts it
    server = PgBouncerServer(
        postgres_server, settings={"server_round_robin": "1", "min_pool_size": "4"}
    )
    with server:
        yield server


@pytest.fixture
def shop(
    pgbouncer: PgBouncerServer, redis_server: RedisServer, tmp_path: Path
) -> Iterator[Processes]:
    """Commands on the test database through PgBouncer, and this test's
    Redis; everything is stopped at teardown."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings_pgbouncer",
        "PYTHONPATH": str(ROOT),
        "DELAYQ_TEST_DB": "postgres",
        "DELAYQ_TEST_SHARED_DB": str(connection.settings_dict["NAME"]),
        "DELAYQ_REDIS_URL": redis_server.url,
        "DELAYQ_PGBOUNCER_HOST": pgbouncer.host,
        "DELAYQ_PGBOUNCER_PORT": str(pgbouncer.port),
    }
    running = Processes(env, tmp_path)
    try:
        yield running
    finally:
        running.stop_all()


def web(
    shop: Processes, function: str, count: int, env: dict[str, str] | None = None
) -> str:
    """Run ``function(count)`` of this module in a ``manage.py shell`` of its
    own, as the shop's web process would; its output."""
    code = f"from {__name__} import {function}; {function}({count})"
    done = subprocess.run(
        [sys.executable, "-m", "django", "shell", "-c", code],
        env={**shop.env, **(env or {})},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not DATABASE_TROUBLE.search(done.stderr), done.stderr
    return done.stdout


# -- what a user sees --------------------------------------------------------------


def keys_run(prefix: str) -> Counter[str]:
    """How many times each task recording a key with ``prefix`` ran."""
    return Counter(
        Ledger.objects.filter(key__startswith=prefix).values_list("key", flat=True)
    )


def unfinished() -> int:
    """Tasks due within 30 s that have not finished (those scheduled for
    later were cancelled or rescheduled), but the periodic schedule's next
    ticks."""
    soon = timezone.now() + datetime.timedelta(seconds=30)
    return (
        DelayedTask.objects.filter(
            status__in=(Status.SCHEDULED, Status.RUNNING), run_at__lt=soon
        )
        .exclude(key__startswith="periodic:")
        .count()
    )


def connections_to(port: int) -> Counter[int]:
    """Established TCP connections to 127.0.0.1:``port``, by the PID of the
    process that holds them (what ``ss -tnp`` shows, read from /proc)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state, inode = fields[2], fields[3], fields[9]
        if state == "01" and remote == f"0100007F:{port:04X}":
            inodes.add(f"socket:[{inode}]")
    holders: Counter[int] = Counter()
    for fds in Path("/proc").glob("[0-9]*/fd"):
        try:
            links = [os.readlink(fd) for fd in fds.iterdir()]
        except OSError:
            continue  # gone meanwhile
        if held := sum(link in inodes for link in links):
            holders[int(fds.parent.name)] += held
    return holders


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def transactions_pooled(pgbouncer: PgBouncerServer) -> int:
    """How many transactions PgBouncer ran on the test database so far."""
    name = connection.settings_dict["NAME"]
    rows = [r for r in pgbouncer.show("STATS") if r["database"] == name]
    return sum(int(row["total_xact_count"]) for row in rows)


def until(
    shop: Processes, condition: Callable[[], object], seconds: float, what: str
) -> None:
    """Wait for ``condition``; if it does not come, fail with the end of
    each process's log."""
    try:
        wait_for(condition, seconds, what, poll=0.1)
    except NotReached as exc:
        tails = "\n".join(f"---- {p.label}:\n{p.tail(15)}" for p in shop.started)
        raise AssertionError(f"{exc}\n{tails}") from None


def logs_without_trouble(shop: Processes, pgbouncer: PgBouncerServer) -> None:
    for process in shop.started:
        trouble = [
            line for line in process.log().splitlines() if DATABASE_TROUBLE.search(line)
        ]
        assert not trouble, f"{process.label}:\n" + "\n".join(trouble)
    trouble = [
        line
        for line in pgbouncer.log_path.read_text().splitlines()
        if PGBOUNCER_TROUBLE.search(line)
    ]
    assert not trouble, "pgbouncer:\n" + "\n".join(trouble)


# -- the tests -------------------------------------------------------------------


def test_the_whole_flow_runs_once_per_task_through_transaction_pooling(
    shop: Processes, pgbouncer: PgBouncerServer, redis_client: redis.Redis
) -> None:
    # A periodic schedule: its planners run in the dispatcher and the sweeper.
    shop.env["DELAYQ_TEST_PERIODIC"] = json.dumps(
        {
            "every-second": {
                "task": "tests.testapp.tasks.record_tick",
                "every": 1,
                "kwargs": {"label": "tick:"},
            }
        }
    )
    dispatcher = shop.start("delayq_dispatch")
    supervisor = shop.start(
        "delayq_worker", "--processes", "2", "--concurrency", "2", "--group-size", "20"
    )
    sweeper = shop.start("delayq_sweep", "--interval", "1")
    before = transactions_pooled(pgbouncer)

    refused = json.loads(web(shop, "shop_day", 300).splitlines()[-1])["refused"]
    assert refused == ["order-45"]
    # Redis down for this one process: the outbox takes its tasks, the
    # sweeper replays them.
    dead_redis = f"redis://{LOOPBACK}:{free_port()}/0"
    web(shop, "outbox_orders", 10, {"DELAYQ_REDIS_URL": dead_redis})

    until(shop, lambda: unfinished() == 0, 45, "every task due finished")
    until(shop, lambda: len(keys_run("tick:")) >= 2, 15, "two ticks of the schedule")
    until(shop, lambda: not OutboxEntry.objects.exists(), 15, "the outbox replayed")

    # Every order ran once, but the 30 cancelled and the one replaced.
    orders = keys_run("order-")
    expected = {f"order-{i}" for i in range(30, 300) if i != 80}
    assert set(orders) == expected | {"order-80 replaced"}
    assert set(orders.values()) == {1}
    assert (
        DelayedTask.objects.filter(
            key__in=[f"order-{i}" for i in range(30)], status=Status.CANCELLED
        ).count()
        == 30
    )
    assert Order.objects.filter(status__startswith="pgbouncer-").count() == 20
    retried = DelayedTask.objects.filter(name__endswith="fails_once")
    assert {row.status for row in retried} == {Status.SUCCEEDED}
    assert all(row.attempts >= 2 for row in retried)
    [failed] = DelayedTask.objects.filter(name__endswith="always_fails")
    assert (failed.status, failed.attempts) == (Status.FAILED, 3)
    outboxed = keys_run("outbox-")
    assert set(outboxed) == {f"outbox-{i}" for i in range(10)}
    assert set(outboxed.values()) == {1}
    replayed = sum(
        int(n) for n in re.findall(r"sweep: replayed (\d+)", shop.log(sweeper))
    )
    assert replayed == 10
    ticks = keys_run("tick:")
    assert set(ticks.values()) == {1}, "a tick ran twice"

    # It all went through PgBouncer: every row was written in a transaction
    # of its own, and every connection of the commands goes to PgBouncer.
    assert transactions_pooled(pgbouncer) - before > DelayedTask.objects.count()
    workers = children_of(supervisor.pid)
    assert len(workers) == 2
    roles = {
        "dispatcher": [dispatcher.pid],
        "sweeper": [sweeper.pid],
        "worker supervisor": [supervisor.pid],
        "worker process": workers,
    }
    through = connections_to(pgbouncer.port)
    direct = connections_to(int(connection.settings_dict["PORT"]))
    census = {role: [through[pid] for pid in pids] for role, pids in roles.items()}
    servers = [
        row
        for row in pgbouncer.show("SERVERS")
        if row["database"] == connection.settings_dict["NAME"]
    ]
    print(
        f"\nconnections to PgBouncer by process: {census}; PgBouncer's "
        f"connections to PostgreSQL for them: {len(servers)}"
    )
    assert not any(direct[pid] for pids in roles.values() for pid in pids), direct
    assert census["dispatcher"] == [2]  # its loop's, its planner's
    assert census["sweeper"] == [2]  # its passes', its planner's
    assert census["worker supervisor"] == [0]  # it runs no task
    # One per thread (--concurrency 2) that ran a task, and the main
    # thread's, which checked the key prefix's owner as it started.
    assert all(1 <= n <= 2 + 1 for n in census["worker process"])
    logs_without_trouble(shop, pgbouncer)


def test_a_rebuild_and_a_sweep_reindex_thousands_of_rows_in_batches(
    shop: Processes, pgbouncer: PgBouncerServer, redis_client: redis.Redis
) -> None:
    """More rows than one batch of the dispatcher's rebuild and of the
    sweeper's pass, all due within the sweeper's window."""
    dispatcher = shop.start("delayq_dispatch")
    web(shop, "far_orders", 2500)
    far = dict(
        DelayedTask.objects.filter(key__startswith="far-").values_list("pk", "shard")
    )
    assert len(far) == 2500

    def indexed() -> bool:
        members = due_members(redis_client)
        return all(pk in members for pk in far)

    def rebuilds() -> list[str]:
        return re.findall(r"rebuilt the index of .*", shop.log(dispatcher))

    # On a new Redis the dispatcher rebuilt the index as it started.
    until(shop, lambda: len(rebuilds()) == 1, 30, "the dispatcher up")
    assert indexed()

    # Redis loses everything. The dispatcher notices on its next move: a
    # task due now, scheduled by the test, makes one.
    redis_client.flushall()
    schedule(add, args=[1, 2])
    until(shop, lambda: len(rebuilds()) == 2, 30, "the dispatcher's rebuild")
    assert re.search(r"reindexed 2500\b", rebuilds()[1])
    assert indexed()

    # One due-set lost, its shard's marker kept: no loop notices, a pass
    # of the sweeper (as cron runs it) repairs it.
    redis_client.delete(due_key("orders", 0))
    lost = sum(shard == 0 for shard in far.values())
    assert 0 < lost < 2500
    assert f"reindexed {lost}," in shop.run("delayq_sweep", "--once")
    assert indexed()
    assert (
        not DelayedTask.objects.filter(key__startswith="far-")
        .exclude(status=Status.SCHEDULED)
        .exists()
    )
    logs_without_trouble(shop, pgbouncer)


def test_migrate_runs_through_pgbouncer(
    shop: Processes, pgbouncer: PgBouncerServer
) -> None:
    """A deploy's ``migrate``, on a new database, through the same pool (the
    migration with ``SET LOCAL`` runs it inside its own transaction)."""
    name = f"delayq_pgbouncer_{os.getpid()}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    try:
        shop.env["DELAYQ_TEST_SHARED_DB"] = name
        out = shop.run("migrate", "--noinput")
        applied = re.findall(r"Applying django_delayq\.(\w+)\.\.\. OK", out)
        ours = ROOT / "django_delayq" / "migrations"
        assert applied == sorted(path.stem for path in ours.glob("0*.py"))
        logs_without_trouble(shop, pgbouncer)
    finally:
        with connection.cursor() as cursor:
            # PgBouncer keeps server connections to it open.
            cursor.execute(f"DROP DATABASE {name} WITH (FORCE)")
