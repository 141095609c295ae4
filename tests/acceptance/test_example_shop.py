"""The example shop, run as a user runs it: manage.py subprocesses, a browser-
like HTTP client with cookies and CSRF, a real Redis and the SQLite file."""

from __future__ import annotations

import http.cookiejar
import os
import re
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tools.servers import RedisServer, free_port

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "example_project" / "manage.py"


class Browser:
    def __init__(self, base: str) -> None:
        self.base = base
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.cookies)
        )

    def get(self, path: str) -> str:
        with self.opener.open(self.base + path, timeout=10) as response:
            return str(response.read().decode())

    def submit(self, page: str, action: str, **fields: str) -> str:
        """POST a form of ``page`` the way a browser would, with its CSRF token."""
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token, "the page has no CSRF token"
        data = urllib.parse.urlencode({"csrfmiddlewaretoken": token[1], **fields})
        request = urllib.request.Request(
            self.base + action, data=data.encode(), headers={"Referer": self.base}
        )
        with self.opener.open(request, timeout=10) as response:
            return str(response.read().decode())


@pytest.fixture
def cancel_delay() -> str:
    return "600"


@pytest.fixture
def shop(
    redis_server: RedisServer, tmp_path: Path, cancel_delay: str
) -> Iterator[tuple[Browser, Path]]:
    db = tmp_path / "shop.sqlite3"
    env = {
        **os.environ,
        "DELAYQ_REDIS_URL": redis_server.url,
        "SHOP_DB": str(db),
        "SHOP_ORDER_CANCEL_DELAY": cancel_delay,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
    }
    subprocess.run(
        [sys.executable, str(MANAGE), "migrate", "--noinput", "-v", "0"],
        env=env,
        check=True,
        timeout=60,
    )
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(MANAGE), "runserver", f"127.0.0.1:{port}", "--noreload"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    # The dispatcher and worker the README's `make example` runs too.
    runner = subprocess.Popen(
        [sys.executable, str(MANAGE), "delayq_run"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    browser = Browser(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                browser.get("/")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(server.stderr.read().decode()) from None
                time.sleep(0.1)
        yield browser, db
    finally:
        for process in (server, runner):
            process.terminate()
        for process in (server, runner):
            process.wait(timeout=30)


def task_row(db: Path, key: str) -> tuple[uuid.UUID, str, str, int]:
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT id, status, queue, shard FROM django_delayq_delayedtask "
            "WHERE key = ? ORDER BY created_at DESC",
            (key,),
        ).fetchone()
    assert row is not None, f"no task with key {key}"
    return uuid.UUID(row[0]), row[1], row[2], row[3]


@pytest.mark.timeout(120)
def test_an_unpaid_order_schedules_its_cancel_and_paying_cancels_it(
    shop: tuple[Browser, Path], redis_client: redis.Redis
) -> None:
    browser, db = shop
    page = browser.get("/")
    assert "No orders yet." in page

    page = browser.submit(page, "/orders/", item="Blue mug")
    assert "Blue mug" in page
    assert '<span class="task-status">scheduled</span>' in page
    assert "due 9" in page  # "due 9 minutes from now" (600 s, minus a moment)

    order_id = re.search(r'id="order-(\d+)"', page)
    assert order_id
    task_id, status, queue, shard = task_row(db, f"order-cancel:{order_id[1]}")
    assert (status, queue) == ("scheduled", "orders")
    due = f"delayq:{{orders:{shard}}}:due"
    assert redis_client.zscore(due, task_id.bytes) is not None

    page = browser.submit(page, f"/orders/{order_id[1]}/pay/")
    assert '<td class="status paid">paid</td>' in page
    assert '<span class="task-status">cancelled</span>' in page
    assert task_row(db, f"order-cancel:{order_id[1]}")[1] == "cancelled"
    assert redis_client.zscore(due, task_id.bytes) is None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cancel_delay", ["1"])
def test_an_order_left_unpaid_is_cancelled_when_its_task_runs(
    shop: tuple[Browser, Path], cancel_delay: str
) -> None:
    browser, db = shop
    page = browser.submit(browser.get("/"), "/orders/", item="Green scarf")
    order_id = re.search(r'id="order-(\d+)"', page)
    assert order_id
    deadline = time.monotonic() + 60
    while '<td class="status cancelled">cancelled</td>' not in page:
        assert time.monotonic() < deadline, "the order was never cancelled"
        time.sleep(0.2)
        page = browser.get("/")
    assert '<span class="task-status">succeeded</span>' in page
    assert task_row(db, f"order-cancel:{order_id[1]}")[1] == "succeeded"
