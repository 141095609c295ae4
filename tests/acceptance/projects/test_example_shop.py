"""The example shop, run as a user runs it: the processes of Procfile.example,
a browser-like HTTP client with cookies and CSRF, a real Redis, and the SQLite
file, or on the PostgreSQL or MariaDB legs a database of its own on that
server (``SHOP_DATABASE_URL``)."""

from __future__ import annotations

import datetime
import html
import http.cookiejar
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.acceptance.processes import ExampleShop
from tests.acceptance.shop_database import ShopDatabase, moment
from tools.procs import wait_for
from tools.servers import MariaDBServer, PostgresServer, RedisServer

pytestmark = pytest.mark.timeout(120)


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
        try:
            with self.opener.open(request, timeout=10) as response:
                return str(response.read().decode())
        except urllib.error.HTTPError as error:
            # A form with errors comes back with status 400, as a page.
            return str(error.read().decode())


#: Unpaid orders wait 10 minutes; coupons are reminded 9 minutes before they
#: expire, in a minute.
SHOP_ENV = {
    "SHOP_ORDER_CANCEL_DELAY": "600",
    "SHOP_COUPON_LIFETIME": "600",
    "SHOP_COUPON_REMIND_BEFORE": "540",
}


@pytest.fixture(scope="module")
def index(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on the shops' Redis, emptied once: the shops run for the
    whole module, and emptying Redis under them is a fault of its own."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="module")
def database_server(
    postgres_server: PostgresServer | None, mariadb_server: MariaDBServer | None
) -> PostgresServer | MariaDBServer | None:
    """The server of the suite's database, where the shops keep their data;
    None on SQLite (each shop its own file)."""
    return postgres_server or mariadb_server


@pytest.fixture(scope="module")
def migrated(
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
    database_server: PostgresServer | MariaDBServer | None,
) -> ShopDatabase | None:
    """A migrated SQLite file with the demo superuser, for each shop to
    copy (a shop on a server migrates its own database)."""
    if database_server is not None:
        return None
    return ExampleShop(redis_server.url, tmp_path_factory.mktemp("template")).prepare()


@pytest.fixture(scope="module")
def shop(
    redis_server: RedisServer,
    index: redis.Redis,
    tmp_path_factory: pytest.TempPathFactory,
    migrated: ShopDatabase | None,
    database_server: PostgresServer | MariaDBServer | None,
) -> Iterator[ExampleShop]:
    """The shop most tests share (starting one takes seconds); each test
    works on orders and coupons of its own."""
    directory = tmp_path_factory.mktemp("shop")
    with ExampleShop(
        redis_server.url, directory, SHOP_ENV, migrated, database_server
    ) as running:
        yield running


@pytest.fixture
def browser(shop: ExampleShop) -> Browser:
    return Browser(shop.url)


def text(markup: str) -> str:
    """The words a person reads in ``markup``."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def row_text(page: str, row_id: str) -> str:
    """The text a person reads in the table row ``row_id`` of the page."""
    row = re.search(rf'<tr id="{row_id}"[^>]*>(.*?)</tr>', page, re.S)
    assert row, f"no row {row_id} on the page"
    return text(row[1])


def last_id(page: str, kind: str) -> str:
    """The id of the newest order or coupon (the first row) on the page."""
    found = re.search(rf'<tr id="{kind}-(\d+)"', page)
    assert found, f"no {kind} on the page"
    return found[1]


def task_row(
    database: ShopDatabase, key: str
) -> tuple[uuid.UUID, str, str, int, datetime.datetime]:
    rows = database.query(
        "SELECT id, status, queue, shard, run_at FROM django_delayq_delayedtask "
        'WHERE "key" = ? ORDER BY created_at DESC',
        (key,),
    )
    assert rows, f"no task with key {key}"
    row = rows[0]
    return uuid.UUID(str(row[0])), row[1], row[2], row[3], moment(row[4])


def counts(database: ShopDatabase) -> tuple[int, int]:
    """How many orders and tasks the shop's database holds."""
    [(orders,)] = database.query("SELECT count(*) FROM shop_order")
    [(tasks,)] = database.query("SELECT count(*) FROM django_delayq_delayedtask")
    return orders, tasks


MILLISECOND = datetime.timedelta(milliseconds=1)


def due_key(queue: str, shard: int) -> str:
    return f"delayq:{{{queue}:{shard}}}:due"


def wait_for_page(browser: Browser, row_id: str, text: str, seconds: float = 60) -> str:
    """Reload the page until row ``row_id`` reads ``text``; return that row."""
    deadline = time.monotonic() + seconds
    while text not in (row := row_text(browser.get("/"), row_id)):
        assert time.monotonic() < deadline, f"{row_id} never showed {text!r}: {row}"
        time.sleep(0.2)
    return row


def test_an_unpaid_order_schedules_its_cancel_and_paying_cancels_it(
    browser: Browser, shop: ExampleShop, index: redis.Redis
) -> None:
    page = browser.get("/")
    assert "orders are cancelled after 10 min by default" in text(page)

    page = browser.submit(page, "/orders/", item="Blue mug", cancel_after="")
    order = last_id(page, "order")
    row = row_text(page, f"order-{order}")
    # 600 s from now, less the moment the request took.
    assert re.search(r"Blue mug unpaid scheduled runs in (10 min|9 min 5\d s)", row)

    task_id, status, queue, shard, _ = task_row(shop.database, f"order-cancel:{order}")
    assert (status, queue) == ("scheduled", "orders")
    assert index.zscore(due_key("orders", shard), task_id.bytes) is not None

    page = browser.submit(page, f"/orders/{order}/pay/")
    row = row_text(page, f"order-{order}")
    assert re.search(r"Blue mug paid cancelled (10 min|9 min 5\d s) before it", row)
    assert "Pay" not in row
    assert task_row(shop.database, f"order-cancel:{order}")[1] == "cancelled"
    assert index.zscore(due_key("orders", shard), task_id.bytes) is None


def test_an_order_left_unpaid_is_cancelled_when_its_task_runs(
    browser: Browser, shop: ExampleShop
) -> None:
    page = browser.get("/")
    page = browser.submit(page, "/orders/", item="Green scarf", cancel_after="1")
    order = last_id(page, "order")
    row = wait_for_page(browser, f"order-{order}", "Green scarf cancelled")
    # "succeeded ran 12 ms late": the task's own account of when it ran.
    assert re.search(r"succeeded ran \d+(\.\d)? m?s late", row), row
    assert task_row(shop.database, f"order-cancel:{order}")[1] == "succeeded"


def test_a_bad_order_form_is_refused_with_the_field_named_and_nothing_written(
    browser: Browser, shop: ExampleShop
) -> None:
    before = counts(shop.database)
    for cancel_after, message in [
        ("0", "Cancel if unpaid after must be at least 1 second."),
        ("soon", "Cancel if unpaid after must be a whole number of seconds."),
        ("9999999", "Cancel if unpaid after must be at most 2592000 seconds"),
    ]:
        page = browser.get("/")
        page = browser.submit(
            page, "/orders/", item="Bad hat", cancel_after=cancel_after
        )
        assert message in text(page)
        # The form keeps what was typed; no order row shows it.
        assert 'value="Bad hat"' in page
        assert not re.search(r"#\d+ Bad hat", text(page))
    page = browser.submit(browser.get("/"), "/orders/", item="  ", cancel_after="5")
    assert "Item must not be empty: name what is ordered" in text(page)
    assert counts(shop.database) == before


def test_a_coupon_schedules_its_reminder_and_using_or_deleting_it_cancels_it(
    browser: Browser, shop: ExampleShop, index: redis.Redis
) -> None:
    page = browser.submit(browser.get("/"), "/orders/", item="Lamp")
    order = last_id(page, "order")

    page = browser.submit(page, f"/orders/{order}/coupon/")
    used = last_id(page, "coupon")
    page = browser.submit(page, f"/orders/{order}/coupon/")
    deleted = last_id(page, "coupon")
    assert used != deleted
    for coupon in (used, deleted):
        row = row_text(page, f"coupon-{coupon}")
        assert re.search(
            rf"order #{order} valid expires in (10 min|9 min 5\d s) "
            r"not reminded scheduled runs in (60|5\d) s",
            row,
        ), row

    # The reminder is due the lead time before the coupon expires.
    [(expires_at,)] = shop.database.query(
        "SELECT expires_at FROM shop_coupon WHERE id = ?", (used,)
    )
    task_id, status, queue, shard, run_at = task_row(
        shop.database, f"coupon-remind:{used}"
    )
    assert (status, queue) == ("scheduled", "coupons")
    lead = moment(expires_at) - run_at
    # To the millisecond: due times are kept in whole milliseconds, rounded up
    # so that nothing runs early.
    assert abs(lead - datetime.timedelta(seconds=540)) < MILLISECOND
    due = due_key("coupons", shard)
    assert index.zscore(due, task_id.bytes) is not None

    page = browser.submit(page, f"/coupons/{used}/use/")
    row = row_text(page, f"coupon-{used}")
    assert re.search(
        r"used used at [\d:]{8} not reminded cancelled (60|5\d) s before it was due",
        row,
    ), row
    assert not re.search(r"\bUse\b", row)
    assert task_row(shop.database, f"coupon-remind:{used}")[1] == "cancelled"
    assert index.zscore(due, task_id.bytes) is None

    deleted_task = task_row(shop.database, f"coupon-remind:{deleted}")[0]
    page = browser.submit(page, f"/coupons/{deleted}/delete/")
    assert f'id="coupon-{deleted}"' not in page
    assert task_row(shop.database, f"coupon-remind:{deleted}")[1] == "cancelled"
    assert index.zscore(due, deleted_task.bytes) is None


def test_a_coupon_reminder_runs_before_expiry_and_the_page_shows_it(
    redis_server: RedisServer,
    index: redis.Redis,
    tmp_path: Path,
    migrated: ShopDatabase | None,
    database_server: PostgresServer | MariaDBServer | None,
) -> None:
    # A shop of its own, reminding a second after a coupon is given. It runs
    # beside the shared one, so it keeps its keys in another Redis database.
    url = redis_server.url.rsplit("/", 1)[0] + "/1"
    env = {**SHOP_ENV, "SHOP_COUPON_REMIND_BEFORE": "599"}
    with ExampleShop(url, tmp_path, env, migrated, database_server) as shop:
        # The shop is up once its web server answers; the page must show the
        # reminder within seconds of the coupon, so the dispatcher and the
        # worker must be up too, not still starting.
        for name, marker in (("dispatcher", " serving "), ("worker", " thread(s) on ")):
            wait_for(
                lambda name=name, marker=marker: marker in shop.log(name),
                60,
                f"the shop's {name} running",
            )
        browser = Browser(shop.url)
        page = browser.submit(browser.get("/"), "/orders/", item="Kite")
        page = browser.submit(page, f"/orders/{last_id(page, 'order')}/coupon/")
        coupon = last_id(page, "coupon")
        row = wait_for_page(browser, f"coupon-{coupon}", "reminded at")
        assert re.search(
            r"valid expires in 9 min 5\d s reminded at [\d:]{8} succeeded", row
        ), row
        [(reminded_at,)] = shop.database.query(
            "SELECT reminded_at FROM shop_coupon WHERE id = ?", (coupon,)
        )
        assert reminded_at is not None


def test_the_state_the_page_polls_matches_the_page(browser: Browser) -> None:
    page = browser.submit(browser.get("/"), "/orders/", item="Clock")
    order = int(last_id(page, "order"))
    state: dict[str, Any] = json.loads(browser.get("/state.json"))
    [shown] = [o for o in state["orders"] if o["id"] == order]
    assert (shown["item"], shown["status"]) == ("Clock", "unpaid")
    assert shown["task"]["status"] == "scheduled"
    assert re.fullmatch(r"runs in (10 min|9 min \d+ s)", shown["task"]["text"])
    assert shown["task"]["text"] in row_text(page, f"order-{order}")
    shown_coupons = {c["id"] for c in state["coupons"]}
    assert shown_coupons == set(map(int, re.findall(r'id="coupon-(\d+)"', page)))


def test_the_demo_superuser_is_created_once_and_can_log_in(
    browser: Browser, shop: ExampleShop
) -> None:
    # A second run (a second `make example`) leaves the user as it is.
    assert "already exists" in shop.manage("demo_superuser")
    page = browser.get("/admin/login/?next=/admin/")
    page = browser.submit(
        page, "/admin/login/?next=/admin/", username="admin", password="admin"
    )
    assert "Site administration" in page
    assert "Log out" in page
