"""The whole flow under the least-privilege Redis ACL the Redis reference
documents: scheduling, dispatching, working, sweeping, the status probe, the
admin dashboard and a worker's stop, as real processes logged in as an ACL
user granted exactly those commands; and what a user missing one of them
sees."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.core.management import CommandError, call_command
from django.urls import reverse

from django_delayq import schedule
from django_delayq.conf import get_settings
from django_delayq.models import DelayedTask, OutboxEntry, Status
from django_delayq.store import connection
from django_delayq.worker import Worker
from django_delayq.worker.loop import READ_BLOCK_MS
from tests.acceptance.commands.test_status_processes import probe
from tests.acceptance.processes import ROOT, Processes
from tests.conftest import delayq_settings
from tests.support.redis_acl import COMMANDS, acl_rules, create_user
from tests.testapp.models import Ledger
from tests.testapp.tasks import add, record
from tools.procs import wait_for
from tools.servers import RedisServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

ADMIN_PASSWORD = "admin-s3cret"
USER, PASSWORD = "delayq", "app-s3cret"
DOCS = ROOT / "docs" / "reference" / "redis.md"


def acl_url(server: RedisServer) -> str:
    # Database 1, so that the connections also need SELECT.
    return f"redis://{USER}:{PASSWORD}@127.0.0.1:{server.port}/1"


@pytest.fixture
def acl_redis(settings) -> Iterator[tuple[RedisServer, redis.Redis]]:
    """A redis-server whose default user needs a password, with the
    documented ACL user, which the test's settings log in as; and a client
    of its administrator."""
    server = RedisServer(password=ADMIN_PASSWORD)
    server.start()
    admin = redis.Redis(port=server.port, password=ADMIN_PASSWORD)
    settings.DELAYQ = delayq_settings(acl_url(server))
    create_user(admin, USER, PASSWORD, get_settings().key_prefix)
    connection.reset()
    try:
        yield server, admin
    finally:
        admin.close()
        connection.reset()
        server.stop()


def denials(admin: redis.Redis) -> list[str]:
    """What the server refused to anyone (``ACL LOG``), as ``user: object``."""
    entries = admin.execute_command("ACL", "LOG")
    return [
        f"{entry[b'username'].decode()}: {entry[b'object'].decode()}"
        if isinstance(entry, dict)
        else repr(entry)
        for entry in entries
    ]


def test_the_documented_acl_is_the_one_tested():
    text = DOCS.read_text()
    block = re.search(
        r"```\{code-block\} text\n:name: redis-acl-setuser\n\n(.*?)```", text, re.S
    )
    assert block is not None, "docs/reference/redis.md lost its redis-acl-setuser block"
    documented = block[1].split()
    assert documented == ["ACL", "SETUSER", "delayq", *acl_rules("delayq")]
    # Each command is also explained in the list after the block.
    for command in COMMANDS:
        assert f"`{command.upper()}`" in text, command


def test_the_whole_flow_runs_under_the_documented_acl(
    acl_redis, processes: Processes, tmp_path: Path, admin_client
) -> None:
    server, admin = acl_redis
    own = Processes(
        {**processes.env, "DELAYQ_REDIS_URL": acl_url(server)}, tmp_path / "acl"
    )
    (tmp_path / "acl").mkdir()
    try:
        own.start("delayq_dispatch", "--lease-ttl", "5")
        # A short visibility timeout: heartbeats of the entries in flight
        # (XCLAIM) every second, takeover scans (XAUTOCLAIM) every 1.5 s.
        worker = own.start(
            "delayq_worker", "--concurrency", "2", "--visibility-timeout", "3"
        )
        own.start("delayq_sweep", "--interval", "1")

        tasks = [schedule(record, args=[f"slow-{i}", 2.0]) for i in range(2)]
        tasks += [schedule(record, args=[f"now-{i}"]) for i in range(3)]
        tasks += [schedule(record, args=[f"later-{i}"], delay=1) for i in range(5)]
        tasks.append(schedule(add, args=[2, 3], delay=600))
        wait_for(lambda: Ledger.objects.count() == 10, 45, "the 10 due tasks ran")
        assert not OutboxEntry.objects.exists()
        assert set(
            DelayedTask.objects.filter(pk__in=[t.pk for t in tasks[:10]]).values_list(
                "status", flat=True
            )
        ) == {Status.SUCCEEDED}

        # The probe a load balancer or process manager runs.
        wait_for(lambda: probe(own)[0] == 0, 45, "delayq_status healthy")
        # A one-off sweep, and the admin dashboard's reads.
        own.run("delayq_sweep", "--once")
        response = admin_client.get(reverse("admin:django_delayq_dashboard"))
        assert response.status_code == 200
        assert "Redis is unreachable" not in response.content.decode()

        # A stop ends the worker's blocked reads, with no command for it.
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        own.stop_all()
    assert denials(admin) == []


@pytest.mark.parametrize(
    ("command", "missing", "says"),
    [
        # The worker's blocking connections name themselves.
        ("delayq_worker", "client|setname", "'client|setname' command"),
        ("delayq_worker", "xreadgroup", "'xreadgroup' command"),
        ("delayq_worker", "evalsha", "'evalsha' command"),
        # Refused inside a script: named after the script's line.
        ("delayq_dispatch", "time", "'time' command (called by "),
        ("delayq_sweep", "type", "'type' command (called by "),
    ],
)
def test_once_stops_on_a_command_the_acl_user_lacks(acl_redis, command, missing, says):
    _server, admin = acl_redis
    schedule(add, args=[1, 2])
    call_command("delayq_dispatch", once=True, verbosity=0)
    create_user(admin, USER, PASSWORD, get_settings().key_prefix, without=(missing,))
    connection.reset()
    started = time.monotonic()
    with pytest.raises(CommandError) as refused:
        call_command(command, once=True, verbosity=0)
    assert time.monotonic() - started < 20
    message = str(refused.value)
    assert "failed: NoPermissionError: " in message
    assert "this user has no permissions to run the" in message
    assert says in message
    assert "grant it to the Redis ACL user" in message


def test_a_looping_worker_logs_a_refused_command_as_an_error(acl_redis, caplog):
    _server, admin = acl_redis
    create_user(
        admin,
        USER,
        PASSWORD,
        get_settings().key_prefix,
        without=("client|setname",),
    )
    connection.reset()
    worker = Worker(queues=["default"])
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        wait_for(
            lambda: any(
                r.levelname == "ERROR" and "'client|setname' command" in r.message
                for r in caplog.records
            ),
            20,
            "the refusal logged as an error",
        )
    finally:
        worker.stop()
        runner.join(timeout=30)
    assert not runner.is_alive()


def test_an_idle_worker_stops_at_once_under_the_documented_acl(acl_redis):
    """No CLIENT permission needed: the worker ends its own blocked reads."""
    _server, admin = acl_redis
    worker = Worker(queues=["default"], concurrency=3)
    runner = threading.Thread(target=worker.run)
    runner.start()

    def blocked() -> int:
        return sum(
            1
            for info in admin.client_list(_type="normal")
            if info.get("user") == USER and "b" in info.get("flags", "")
        )

    try:
        wait_for(lambda: blocked() == 3, 20, "three threads blocked in their reads")
        worker.stop()
        # Each read would block for READ_BLOCK_MS (5 s) on the server.
        runner.join(timeout=READ_BLOCK_MS / 1000 - 1)
        assert not runner.is_alive(), "the idle worker waited out its reads"
    finally:
        worker.stop()
        runner.join(timeout=30)
    assert blocked() == 0
    assert worker.stats.errors == 0
    assert denials(admin) == []
