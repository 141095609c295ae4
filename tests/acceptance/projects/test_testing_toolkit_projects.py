"""The testing toolkit as users run it: ``manage.py test`` and pytest in
projects of their own, with no Redis server; and an async view scheduling
under a real ASGI server."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.processes import ExampleShop
from tests.acceptance.projects.test_example_shop import Browser
from tests.acceptance.projects.test_user_project_tests import UserProject
from tools.procs import ROOT, NotReached, wait_for
from tools.servers import RedisServer

pytestmark = pytest.mark.timeout(120)

TOOLKIT_TESTS = """
import datetime

from django.test import TestCase
from django.utils import timezone

from django_delayq.testing import assert_scheduled, run_due

from .models import Order
from .tasks import order_cancel


class OrderCancelTests(TestCase):
    def test_a_new_order_schedules_its_cancellation(self):
        order = Order.objects.create()
        order_cancel.schedule(args=[order.pk], delay=900, key=f"cancel:{order.pk}")
        assert_scheduled(order_cancel, args=[order.pk], key=f"cancel:{order.pk}")

    def test_an_order_still_unpaid_15_minutes_later_is_cancelled(self):
        order = Order.objects.create()
        order_cancel.schedule(args=[order.pk], delay=900)
        run_due(until=timezone.now() + datetime.timedelta(minutes=16))
        order.refresh_from_db()
        self.assertEqual(order.status, "cancelled")
"""

FIXTURE_TESTS = """
import datetime

import pytest
from django.utils import timezone

from shop.models import Order
from shop.tasks import order_cancel


@pytest.mark.django_db
def test_a_new_order_schedules_its_cancellation(delayq):
    assert delayq.mode == "manual"
    order = Order.objects.create()
    order_cancel.schedule(args=[order.pk], delay=900)
    delayq.assert_scheduled(order_cancel, args=[order.pk])
    assert len(delayq.scheduled(order_cancel)) == 1


@pytest.mark.django_db
def test_an_order_still_unpaid_15_minutes_later_is_cancelled(delayq):
    order = Order.objects.create()
    order_cancel.schedule(args=[order.pk], delay=900)
    ran = delayq.run_due(until=timezone.now() + datetime.timedelta(minutes=16))
    assert [r.outcome for r in ran] == ["succeeded"]
    order.refresh_from_db()
    assert order.status == "cancelled"


@pytest.mark.django_db
def test_immediate_mode_for_one_block(delayq):
    with delayq.test_mode("immediate"):
        order = Order.objects.create()
        order_cancel.schedule(args=[order.pk], delay=900)
    order.refresh_from_db()
    assert order.status == "cancelled"
"""

#: Plugins loaded by name: the one under test, as its entry point would.
PLUGIN = ["-p", "django_delayq.testing.pytest_plugin", "-p", "no:cacheprovider"]


def closed_port_url() -> str:
    """A Redis URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


class ToolkitProject(UserProject):
    """A user's project whose test settings set ``TEST_MODE``, and no Redis."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, closed_port_url())
        # The checkout under test (the venv's editable install may be another).
        self.env["PYTHONPATH"] = str(ROOT)
        settings = root / "mysite" / "settings.py"
        settings.write_text(f'{settings.read_text()}DELAYQ["TEST_MODE"] = "manual"\n')
        (root / "shop" / "tests.py").write_text(TOOLKIT_TESTS)

    def pytest(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", *PLUGIN, *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture
def project(tmp_path: Path) -> ToolkitProject:
    return ToolkitProject(tmp_path)


def test_a_projects_tests_use_the_toolkit_under_manage_py_test_and_pytest(
    project: ToolkitProject,
) -> None:
    output = project.test("-v", "2")
    assert "Ran 2 tests" in output
    assert "Redis" not in output  # no connection tried, none reported

    # The delayq fixture, under pytest-django; it takes the manual mode
    # when the settings set none.
    (project.root / "test_orders.py").write_text(FIXTURE_TESTS)
    settings = project.root / "mysite" / "settings.py"
    settings.write_text(
        settings.read_text().replace('DELAYQ["TEST_MODE"] = "manual"\n', "")
    )
    done = project.pytest("--ds", "mysite.settings", "test_orders.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_the_plugin_leaves_a_session_without_django_alone(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text(
        "import sys\n\n\n"
        "def test_nothing_of_django_was_imported():\n"
        "    assert 'django' not in sys.modules\n"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:django", "test_plain.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_the_example_projects_own_tests_pass_with_no_redis() -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "test", "shop", "--noinput"],
        cwd=ROOT / "example_project",
        env={
            **{k: v for k, v in os.environ.items() if k != "SHOP_DB"},
            "DJANGO_SETTINGS_MODULE": "example_project.settings",
            "DELAYQ_REDIS_URL": closed_port_url(),
            "PYTHONPATH": str(ROOT),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Ran 4 tests" in output


# -- an async view under uvicorn ------------------------------------------------


@pytest.fixture
def asgi_shop(redis_server: RedisServer, tmp_path: Path) -> Iterator[ExampleShop]:
    # A shop of its own (its own SQLite file), so a Redis database of its
    # own: the shared shop of test_example_shop.py claims database 0's
    # KEY_PREFIX for its database (delayq.E014), and the coupon test's uses 1.
    url = redis_server.url.rsplit("/", 1)[0] + "/2"
    shop = ExampleShop(url, tmp_path)
    # The web process under uvicorn instead of runserver: async views run on
    # its event loop.
    shop.commands["web"] = [
        sys.executable,
        "-m",
        "uvicorn",
        "--app-dir",
        "example_project",
        "--host",
        "127.0.0.1",
        "--port",
        str(shop.port),
        "example_project.asgi:application",
    ]
    with shop:
        yield shop


def test_an_async_view_under_uvicorn_schedules_and_the_task_runs(
    asgi_shop: ExampleShop,
) -> None:
    browser = Browser(asgi_shop.url)
    page = browser.get("/")
    answer = json.loads(
        browser.submit(page, "/api/orders/", item="Mug", cancel_after="1")
    )
    order = answer["order"]

    def status() -> str:
        with sqlite3.connect(asgi_shop.db) as db:
            row = db.execute(
                "SELECT status FROM shop_order WHERE id = ?", [order]
            ).fetchone()
        return str(row[0])

    assert status() == "unpaid"
    # The shop counts as up once uvicorn answers; on a busy machine its
    # dispatcher and worker may still be starting: the bound is generous.
    try:
        wait_for(lambda: status() == "cancelled", 90, "the order's cancel task to run")
    except NotReached as exc:  # the logs as they are at the timeout
        raise NotReached(f"{exc}\n{asgi_shop.logs()}") from None
