"""The example shop and the django-delayq admin, used in headless Chromium
the way a person uses them: the shop page, the admin's login form, task list,
actions and dashboard; checked against the example's SQLite file and Redis.

The tests run in order on one shop and one browser tab: the first admin test
logs in through the login form, and the dashboard test counts what the others
did.
"""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from playwright.sync_api import Locator, Page, expect

from django_delayq.store.inspect import due_scores
from django_delayq.store.keys import shard_keys
from tests.acceptance.processes import ExampleShop
from tools.procs import wait_for
from tools.servers import RedisServer

# Starting the shop, in the first test, takes a while on a busy machine.
pytestmark = pytest.mark.timeout(180)

TASKS = "/admin/django_delayq/delayedtask/"
DASHBOARD = "/admin/django_delayq/delayedtask/dashboard/"
SCHEDULES = "/admin/django_delayq/periodicschedule/"
STATUSES = ("scheduled", "running", "succeeded", "failed", "cancelled")


@pytest.fixture(scope="module")
def index(shop: ExampleShop, redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on the shop's Redis, to look into the due-sets."""
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


def create_order(page: Page, item: str, cancel_after: int | None = None) -> Locator:
    """Create an order in the shop page; return its row."""
    page.goto("/")
    page.get_by_label("Item").fill(item)
    if cancel_after is not None:
        page.get_by_label("Cancel if unpaid after").fill(str(cancel_after))
    page.get_by_role("button", name="Create unpaid order").click()
    row = page.locator("tr[data-kind=order]").filter(has_text=item)
    expect(row).to_have_count(1)
    return row


def order_id(row: Locator) -> int:
    row_id = row.get_attribute("id")
    assert row_id is not None
    assert row_id.startswith("order-"), row_id
    return int(row_id.removeprefix("order-"))


def cancel_task(db: Path, order: int) -> tuple[uuid.UUID, str, int]:
    """The order's cancel task, from the example's database: id, status, shard."""
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT id, status, shard FROM django_delayq_delayedtask "
            "WHERE key = ? ORDER BY created_at DESC",
            (f"order-cancel:{order}",),
        ).fetchone()
    assert row is not None, f"order {order} has no cancel task"
    return uuid.UUID(row[0]), row[1], row[2]


def in_due_set(index: redis.Redis, task_id: uuid.UUID, shard: int) -> bool:
    keys = shard_keys("delayq", "orders", shard)
    return bool(due_scores(index, keys, [task_id])[task_id])


def log_in(page: Page, next_path: str) -> None:
    """Open ``next_path``, through the admin's login form when it asks."""
    page.goto(next_path)
    if "/admin/login/" in page.url:
        page.get_by_label("Username").fill("admin")
        page.get_by_label("Password").fill("admin")
        page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(re.escape(next_path) + "$"))


def task_row(page: Page, task_id: uuid.UUID) -> Locator:
    """The task's row in the admin task list."""
    checkbox = page.locator(f'input.action-select[value="{task_id}"]')
    return page.locator("#result_list tbody tr").filter(has=checkbox)


def cell(row: Locator, text: str | re.Pattern[str]) -> Locator:
    """The cells of ``row`` whose whole text is ``text``."""
    if isinstance(text, str):
        text = re.compile(re.escape(text))
    whole = re.compile(rf"^\s*(?:{text.pattern})\s*$", text.flags)
    return row.locator("th, td").filter(has_text=whole)


def counts_by_status(page: Page, queue: str) -> dict[str, int]:
    """The row of ``queue`` in the page's table of task counts by status."""
    for table in page.locator("table").all():
        headers = [
            h.strip().lower() for h in table.locator("thead th").all_inner_texts()
        ]
        if not set(STATUSES) <= set(headers):
            continue
        for row in table.locator("tbody tr").all():
            cells = [c.strip() for c in row.locator("th, td").all_inner_texts()]
            if cells and cells[0] == queue:
                return {
                    status: int(cells[headers.index(status)]) for status in STATUSES
                }
    raise AssertionError(f"no table of task counts by status with a row for {queue}")


# -- 1 and 2: an order's task in the admin, cancelled there -------------------


def test_a_new_order_shows_its_pending_cancel_task_in_the_admin(
    page: Page, shop: ExampleShop, index: redis.Redis, screenshots: Path
) -> None:
    row = create_order(page, "Blue mug")
    expect(row.locator(".status")).to_have_text("unpaid")
    expect(row.locator(".task-status")).to_have_text("scheduled")
    expect(row.locator(".task-when")).to_have_text(re.compile(r"runs in (10|9) min"))
    task_id, status, shard = cancel_task(shop.db, order_id(row))
    assert status == "scheduled"
    assert in_due_set(index, task_id, shard)

    log_in(page, TASKS)
    listed = task_row(page, task_id)
    expect(listed).to_have_count(1)
    for shown in [
        "shop.tasks.order_cancel",
        "orders",
        re.compile("scheduled", re.I),
        # The admin's run_at, and under it the relative one: "in 9 min" or
        # "in 10 min".
        re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\s*in (9|10) min"),
    ]:
        expect(cell(listed, shown)).to_have_count(1)
    page.screenshot(path=screenshots / "admin-task-list.png", full_page=True)


def test_cancelling_the_task_with_the_admin_action_cancels_it_in_db_and_redis(
    page: Page, shop: ExampleShop, index: redis.Redis, screenshots: Path
) -> None:
    order = order_id(create_order(page, "Red hat"))
    task_id, _, shard = cancel_task(shop.db, order)

    log_in(page, TASKS)
    task_row(page, task_id).locator("input.action-select").check()
    page.locator("select[name=action]").select_option("cancel_tasks")
    page.locator("button[name=index]").click()
    # The action may ask for a confirmation first, as deleting does (Django
    # writes that button's apostrophe as U+2019).
    confirm = page.get_by_role("button", name=re.compile("^Yes, I[\u2019']m sure$"))
    messages = page.locator("ul.messagelist")
    expect(confirm.or_(messages).first).to_be_visible()
    if confirm.count():
        confirm.click()
    expect(page.locator("ul.messagelist li.success")).to_be_visible()
    expect(task_row(page, task_id)).to_contain_text(re.compile("cancelled", re.I))
    page.screenshot(path=screenshots / "admin-task-list-cancelled.png", full_page=True)

    assert cancel_task(shop.db, order)[1] == "cancelled"
    wait_for(
        lambda: not in_due_set(index, task_id, shard), 15, "the id left the due-set"
    )
    # The shop page tells the same story.
    page.goto("/")
    shown = page.locator(f"#order-{order}")
    expect(shown.locator(".task-status")).to_have_text("cancelled")
    expect(shown.locator(".status")).to_have_text("unpaid")


# -- 3 and 4: paying, and not paying -----------------------------------------


def test_paying_an_order_shows_its_cancel_task_cancelled(
    page: Page, shop: ExampleShop, index: redis.Redis
) -> None:
    row = create_order(page, "Green scarf")
    order = order_id(row)
    task_id, _, shard = cancel_task(shop.db, order)
    row.get_by_role("button", name="Pay").click()
    row = page.locator(f"#order-{order}")
    expect(row.locator(".status")).to_have_text("paid")
    expect(row.locator(".task-status")).to_have_text("cancelled")
    expect(row.get_by_role("button", name="Pay")).to_have_count(0)
    assert cancel_task(shop.db, order)[1] == "cancelled"
    assert not in_due_set(index, task_id, shard)


def test_an_unpaid_order_is_cancelled_by_its_task_while_the_page_watches(
    page: Page, shop: ExampleShop, screenshots: Path
) -> None:
    row = create_order(page, "Yellow kite", cancel_after=3)
    # No reload from here on: the page's own polling shows the change. A mark
    # on this very page proves that it was not reloaded meanwhile.
    page.evaluate("window.sameDocument = true")
    expect(row.locator(".status")).to_have_text("cancelled", timeout=30_000)
    assert page.evaluate("window.sameDocument === true")
    expect(row.locator(".task-status")).to_have_text("succeeded")
    expect(row.locator(".task-when")).to_have_text(
        re.compile(r"ran \d+(\.\d)? m?s late")
    )
    expect(row.get_by_role("button", name="Pay")).to_have_count(0)
    assert cancel_task(shop.db, order_id(row))[1] == "succeeded"
    page.screenshot(path=screenshots / "shop.png", full_page=True)


# -- 5: the dashboard ---------------------------------------------------------


def test_the_dashboard_shows_the_task_counts(
    page: Page, shop: ExampleShop, screenshots: Path
) -> None:
    with sqlite3.connect(shop.db) as conn:
        counts = dict(
            conn.execute(
                "SELECT status, count(*) FROM django_delayq_delayedtask GROUP BY status"
            ).fetchall()
        )
    # What the tests above left: one order waiting, two cancelled, one run.
    assert counts == {"scheduled": 1, "cancelled": 2, "succeeded": 1}

    log_in(page, DASHBOARD)
    page.screenshot(path=screenshots / "admin-dashboard.png", full_page=True)
    # Every task above is in the orders queue.
    assert counts_by_status(page, "orders") == {
        status: counts.get(status, 0) for status in STATUSES
    }


# -- 6: the periodic schedules (after the counts: resuming writes ticks) ------


def schedule_paused(db: Path, name: str) -> bool:
    with sqlite3.connect(db) as conn:
        [(paused,)] = conn.execute(
            "SELECT paused FROM django_delayq_periodicschedule WHERE name = ?",
            (name,),
        ).fetchall()
    return bool(paused)


def test_the_schedules_are_listed_and_one_is_resumed_and_paused_again(
    page: Page, shop: ExampleShop, screenshots: Path
) -> None:
    log_in(page, SCHEDULES)
    rows = page.locator("#result_list tbody tr")
    carts = rows.filter(has_text="close-stale-orders")
    report = rows.filter(has_text="daily-orders-report")
    expect(carts.locator("td.field-definition_label")).to_contain_text("every 30 s")
    expect(report.locator("td.field-definition_label")).to_contain_text(
        "cron 0 8 * * * in Asia/Shanghai"
    )
    # The shop's processes start with the schedules paused (see ExampleShop).
    expect(carts.locator("td.field-next_tick_label")).to_have_text("paused")

    def act(action: str) -> None:
        carts.locator("input.action-select").check()
        page.locator("select[name=action]").select_option(action)
        page.locator("button[name=index]").click()

    act("resume_schedules")
    expect(page.locator("ul.messagelist li.success")).to_contain_text(
        "Resumed 1 schedule from its next tick"
    )
    expect(carts.locator("td.field-next_tick_label")).to_contain_text(
        re.compile(r"in \d+ s|due now")
    )
    assert not schedule_paused(shop.db, "close-stale-orders")
    # The dispatcher plans it again: its ticks are written a few seconds
    # ahead from now on (resuming set "planned through" to the moment).
    resumed = planned_through(shop.db)
    wait_for(
        lambda: planned_through(shop.db) > resumed, 10, "the dispatcher planned it"
    )
    page.screenshot(path=screenshots / "admin-periodic.png", full_page=True)

    act("pause_schedules")
    expect(page.locator("ul.messagelist li.success")).to_contain_text(
        "Paused 1 schedule"
    )
    expect(carts.locator("td.field-next_tick_label")).to_have_text("paused")
    assert schedule_paused(shop.db, "close-stale-orders")


def planned_through(db: Path) -> str:
    """The schedule's planned_through as SQLite holds it (text in UTC, which
    sorts as the times do)."""
    with sqlite3.connect(db) as conn:
        [(moment,)] = conn.execute(
            "SELECT planned_through FROM django_delayq_periodicschedule "
            "WHERE name = 'close-stale-orders'"
        ).fetchall()
    return str(moment)
