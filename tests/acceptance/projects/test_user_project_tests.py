"""A project's own ``manage.py test`` next to its development processes.

A fresh project as a user writes it (``startproject``, an app with a model,
a task and tests; no ``django.contrib.admin``: an API-only project), its
default SQLite database, and one private redis-server shared by the
development processes and the test runs, as on a developer's machine.
Nothing in the project's settings mentions tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tools.procs import Process, wait_for
from tools.servers import RedisServer

# A dozen Django processes start, each about a second.
pytestmark = pytest.mark.timeout(240)

BIN = Path(sys.executable).parent

MODELS = """
from django.db import models


class Order(models.Model):
    status = models.CharField(max_length=20, default="unpaid")
"""

TASKS = """
from django_delayq import task

from .models import Order


@task
def order_cancel(order_id: int) -> None:
    Order.objects.filter(pk=order_id, status="unpaid").update(status="cancelled")
"""

# Two classes, so that `test --parallel 2` runs them in two processes.
TESTS = """
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import TestCase, TransactionTestCase

from .models import Order
from .tasks import order_cancel


class OrderCancelTests(TransactionTestCase):
    def test_an_unpaid_order_is_cancelled(self):
        order = Order.objects.create()
        order_cancel.schedule(args=[order.pk])
        call_command("delayq_dispatch", once=True)
        call_command("delayq_worker", once=True)
        order.refresh_from_db()
        self.assertEqual(order.status, "cancelled")


class MoreOrderCancelTests(TransactionTestCase):
    def test_a_paid_order_stays_paid(self):
        order = Order.objects.create(status="paid")
        order_cancel.schedule(args=[order.pk])
        call_command("delayq_dispatch", once=True)
        call_command("delayq_worker", once=True)
        order.refresh_from_db()
        self.assertEqual(order.status, "paid")
"""

# A worker run inside TestCase's transaction: on SQLite its threads are
# locked out of the database. It must say so at once, not retry forever.
IN_TRANSACTION_TESTS = """
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import TestCase

from .models import Order
from .tasks import order_cancel


class WorkerInsideTestCase(TestCase):
    def test_the_worker_says_why_it_cannot_run(self):
        order = Order.objects.create()
        with self.captureOnCommitCallbacks(execute=True):
            order_cancel.schedule(args=[order.pk])
        call_command("delayq_dispatch", once=True)
        with self.assertRaises(CommandError) as raised:
            call_command("delayq_worker", once=True)
        print("WORKER ERROR:", raised.exception)
        self.assertIn("TransactionTestCase", str(raised.exception))
"""


class UserProject:
    """The project's directory and the commands a developer types in it."""

    def __init__(self, root: Path, redis_url: str) -> None:
        self.root = root
        # A fresh user's environment: nothing of this test suite's.
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "DELAYQ_")) and key != "PYTHONPATH"
        }
        self.env["PATH"] = f"{BIN}{os.pathsep}{self.env.get('PATH', '')}"
        subprocess.run(
            [BIN / "django-admin", "startproject", "mysite", "."],
            cwd=root,
            env=self.env,
            check=True,
        )
        self.manage("startapp", "shop")
        settings = root / "mysite" / "settings.py"
        text = settings.read_text().replace('    "django.contrib.admin",\n', "")
        text = text.replace(
            "INSTALLED_APPS = [",
            'INSTALLED_APPS = [\n    "django_delayq",\n    "shop",',
        )
        settings.write_text(f"{text}\nDELAYQ = {{'REDIS_URL': {redis_url!r}}}\n")
        urls = root / "mysite" / "urls.py"
        urls.write_text("urlpatterns = []\n")
        (root / "shop" / "models.py").write_text(MODELS)
        (root / "shop" / "tasks.py").write_text(TASKS)
        (root / "shop" / "tests.py").write_text(TESTS)
        self.manage("makemigrations", "shop")

    def manage(
        self, *args: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def test(self, *args: str) -> str:
        """``manage.py test ARGS``, which must pass; its output."""
        done = self.manage("test", "--noinput", *args)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        return output

    def worker(self) -> Process:
        process = Process(
            [sys.executable, "manage.py", "delayq_worker"],
            log_path=self.root / "worker.log",
            env=self.env,
            cwd=self.root,
        )
        return process.start()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def project(tmp_path: Path, redis_server: RedisServer) -> UserProject:
    return UserProject(tmp_path, redis_server.url)


def leftover_test_keys(client: redis.Redis) -> list[bytes]:
    return sorted(client.scan_iter(match="test_*"))


def test_the_tests_run_beside_a_running_development_worker(
    project: UserProject, redis_server: RedisServer
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    migrated = project.manage("migrate")
    assert migrated.returncode == 0, migrated.stderr
    worker = project.worker()
    try:
        wait_for(
            lambda: client.zcard("delayq:workers") == 1,
            30,
            f"the development worker to start:\n{worker.tail()}",
        )
        owner = client.get("delayq:owner")
        assert owner is not None  # the development database claimed it

        assert "OK" in project.test()
        assert "OK" in project.test("--parallel", "2")

        # The test runs left the development project's keys alone, and
        # removed their own.
        assert client.get("delayq:owner") == owner
        assert leftover_test_keys(client) == []
        assert worker.alive(), worker.tail()
    finally:
        worker.stop()
    assert worker.popen is not None
    assert worker.popen.returncode == 0, worker.tail()
    assert "E014" not in worker.log()


def test_a_test_run_on_an_empty_redis_claims_nothing_of_the_project(
    project: UserProject, redis_server: RedisServer
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    assert "OK" in project.test()
    assert client.get("delayq:owner") is None
    assert leftover_test_keys(client) == []

    migrated = project.manage("migrate")
    assert migrated.returncode == 0, migrated.stderr
    once = project.manage("delayq_worker", "--once")
    assert once.returncode == 0, once.stderr


def test_a_worker_inside_a_testcase_fails_at_once_saying_what_to_use(
    project: UserProject,
) -> None:
    (project.root / "shop" / "tests.py").write_text(IN_TRANSACTION_TESTS)
    output = project.test("-v", "2")
    assert "WORKER ERROR: delayq_worker cannot run inside a transaction" in output
