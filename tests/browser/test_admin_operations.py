"""The operators' side of the admin in headless Chromium, 1,400 px wide:
breadcrumbs in the running Django's own markup and style, the task list's
columns, the dashboard's activity charts, a worker that has waited for
work for over a minute still shown alive, a queue paused and resumed from
the dashboard, and an action over every task the filters match.

The tests run in order on one shop: the first runs tasks through its real
dispatcher and worker, and the fifth waits until that worker has been idle
for more than a minute, counting the time the others took; the last two
change what the others look at, so they come after.
"""

from __future__ import annotations

import datetime
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import django
import pytest
import redis
from playwright.sync_api import Browser, Locator, Page, expect

from tests.acceptance.processes import ExampleShop
from tests.browser.conftest import open_tab
from tests.browser.test_example_shop import (
    DASHBOARD,
    TASKS,
    cancel_task,
    create_order,
    log_in,
    order_id,
)
from tools.procs import wait_for
from tools.servers import RedisServer

pytestmark = pytest.mark.timeout(240)

#: The admin's breadcrumbs background (--breadcrumbs-bg), in both versions.
BREADCRUMBS_BG = "rgb(38, 75, 93)"
#: Short, so that a worker idle for a minute has renewed its heartbeat
#: (every third of it) several times, and would have lost it otherwise.
VISIBILITY_TIMEOUT = 15
#: How long the worker must have waited for work before the liveness test.
IDLE_SECONDS = 65


@pytest.fixture(scope="module")
def shop(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ExampleShop]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    env = {
        "SHOP_ORDER_CANCEL_DELAY": "600",
        "SHOP_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT),
    }
    with ExampleShop(redis_server.url, tmp_path_factory.mktemp("ops"), env) as running:
        yield running
        print(running.logs())


@pytest.fixture(scope="module")
def page(chromium: Browser, shop: ExampleShop) -> Iterator[Page]:
    # The width of a laptop's browser with the admin's sidebar open.
    yield from open_tab(chromium, shop, 1400)


def last_finish(db: Path) -> datetime.datetime:
    with sqlite3.connect(db) as conn:
        [(value,)] = conn.execute(
            "SELECT max(finished_at) FROM django_delayq_delayedtask"
        ).fetchall()
    assert value is not None
    moment = datetime.datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def test_orders_cancelled_by_the_worker_show_the_same_lateness_in_shop_and_admin(
    page: Page, shop: ExampleShop
) -> None:
    rows = [create_order(page, f"Lamp {n}", cancel_after=1) for n in range(3)]
    for row in rows:
        expect(row.locator(".task-status")).to_have_text("succeeded", timeout=30_000)
    shown = rows[0].locator(".task-when").inner_text()
    match = re.fullmatch(r"ran (\d+(?:\.\d)? m?s) late", shown.strip())
    assert match, shown
    task_id, status, _ = cancel_task(shop.db, order_id(rows[0]))
    assert status == "succeeded"
    log_in(page, f"{TASKS}{task_id}/change/")
    # The admin's timeline says it with the same words and rounding.
    expect(page.locator(".delayq-timeline")).to_contain_text(
        f"ran {match.group(1)} late"
    )


@pytest.mark.parametrize("path", [TASKS, DASHBOARD])
def test_breadcrumbs_are_the_running_djangos_own_and_styled(
    page: Page, shop: ExampleShop, path: str, screenshots: Path
) -> None:
    log_in(page, path)
    if django.VERSION >= (6, 0):
        crumbs = page.locator("ol.breadcrumbs")
        items = crumbs.locator("li")
        expect(items.first).to_have_text("Home")
        # Styled by the admin's CSS: a bar of inline items, no list bullets,
        # each but the last followed by its separator.
        assert items.first.evaluate("e => getComputedStyle(e).display") == (
            "inline-block"
        )
        after = items.first.evaluate("e => getComputedStyle(e, '::after').content")
        assert "\u203a" in after, after
        tops = {
            round(box["y"]) for box in (i.bounding_box() for i in items.all()) if box
        }
        assert len(tops) == 1, "the breadcrumbs wrap or stack like a plain list"
        labels = [t.strip() for t in items.all_inner_texts()]
    else:
        crumbs = page.locator("div.breadcrumbs")
        expect(crumbs).to_contain_text("\u203a")
        labels = [t.strip() for t in crumbs.inner_text().split("\u203a")]
    assert crumbs.evaluate("e => getComputedStyle(e).backgroundColor") == (
        BREADCRUMBS_BG
    )
    assert labels[:3] == ["Home", "Delay queue", "Delayed tasks"]
    name = "tasks" if path == TASKS else "dashboard"
    page.screenshot(path=screenshots / f"breadcrumbs-{name}.png")


def test_the_task_list_shows_attempts_and_the_dedupe_key_at_1400_px(
    page: Page, shop: ExampleShop, screenshots: Path
) -> None:
    log_in(page, TASKS)
    results = page.locator("#changelist .results")
    frame = results.bounding_box()
    assert frame is not None
    for column, title in (("attempts_label", "Attempts"), ("key", "Dedupe key")):
        th = page.locator(f"#result_list thead th.column-{column}")
        expect(th).to_have_text(re.compile(rf"^\s*{title}\s*$", re.I))
        expect(th).to_be_visible()
        box = th.bounding_box()
        assert box is not None
        assert box["x"] + box["width"] <= frame["x"] + frame["width"] + 1, column
    first = page.locator("#result_list tbody tr").first
    key = first.locator("td.field-key")
    expect(key).to_have_text(re.compile(r"order-cancel:\d+"))
    box = key.bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= frame["x"] + frame["width"] + 1
    expect(first.locator("td.field-attempts_label")).to_have_text("1/5")
    # Nothing to scroll sideways to: the table fits its frame.
    assert results.evaluate("e => e.scrollWidth <= e.clientWidth")
    page.screenshot(path=screenshots / "task-list-1400.png", full_page=True)


def test_the_dashboard_charts_what_the_worker_did(
    page: Page, shop: ExampleShop, screenshots: Path
) -> None:
    log_in(page, DASHBOARD)
    chart = page.locator("#delayq-activity svg")
    expect(chart).to_be_visible()
    expect(chart.locator("title").first).to_have_text(
        re.compile(r"^3 tasks started in the last hour: 3 succeeded, 0 failed$")
    )
    minutes = chart.locator("g.delayq-minute")
    started = sum(int(m.get_attribute("data-started") or 0) for m in minutes.all())
    assert started == 3
    bar = minutes.first.locator("rect.delayq-bar")
    box = bar.bounding_box()
    assert box is not None
    assert box["height"] > 10  # drawn, and to scale
    lateness = page.locator("#delayq-lateness svg")
    expect(lateness.locator("circle.delayq-dot-p50").first).to_be_visible()
    expect(lateness.locator("polyline.delayq-line-p99")).to_have_count(1)
    p50 = [
        int(c.get_attribute("data-p50-ms") or 0)
        for c in lateness.locator("circle.delayq-dot-p50").all()
    ]
    assert all(0 < ms <= 5_000 for ms in p50), p50
    page.locator("#delayq-activity").screenshot(path=screenshots / "activity.png")
    page.locator("#delayq-lateness").screenshot(path=screenshots / "lateness.png")


def test_a_worker_idle_for_over_a_minute_is_still_shown_alive(
    page: Page, shop: ExampleShop, screenshots: Path
) -> None:
    # The time the tests above took counts: wait only for the rest.
    idle_since = last_finish(shop.db)
    wait = IDLE_SECONDS - (datetime.datetime.now(datetime.UTC) - idle_since).seconds
    if wait > 0:
        time.sleep(wait)
    log_in(page, DASHBOARD)
    workers = page.locator("#delayq-workers tbody tr")
    expect(workers).to_have_count(1)
    row = workers.first
    expect(row).not_to_contain_text("no heartbeat")
    cells = [c.strip() for c in row.locator("td").all_inner_texts()]
    # The worker reads every shard of the shop's queues: default (1),
    # orders (2) and coupons (1).
    assert cells[2] == "4", cells
    wait_for(
        lambda: (
            (datetime.datetime.now(datetime.UTC) - idle_since).seconds >= IDLE_SECONDS
        ),
        5,
        "a minute of idleness",
    )
    page.screenshot(path=screenshots / "dashboard-idle-worker.png", full_page=True)


def queue_state(page: Page, queue: str) -> Locator:
    return page.locator(f'#delayq-counts td.delayq-queue-state[data-queue="{queue}"]')


def test_a_queue_is_paused_and_resumed_from_the_dashboard(
    page: Page, shop: ExampleShop, screenshots: Path
) -> None:
    log_in(page, DASHBOARD)
    orders = queue_state(page, "orders")
    expect(orders).to_contain_text("Running")
    orders.get_by_role("textbox").fill("stock count")
    orders.get_by_role("button", name="Pause").click()
    expect(page.locator("ul.messagelist")).to_contain_text(
        "Queue 'orders' paused: no worker starts its tasks until it is resumed"
    )
    orders = queue_state(page, "orders")
    expect(orders).to_contain_text(
        re.compile(r"Paused\s+since .* by admin: stock count")
    )
    expect(queue_state(page, "coupons")).to_contain_text("Running")
    assert re.search(
        r"^orders\s+paused .* by admin: stock count$",
        shop.manage("delayq_queue", "list"),
        re.M,
    )
    page.locator("#delayq-counts").screenshot(path=screenshots / "queue-paused.png")

    orders.get_by_role("button", name="Resume").click()
    expect(page.locator("ul.messagelist")).to_contain_text(
        "Queue 'orders' resumed: its tasks due meanwhile start"
    )
    expect(queue_state(page, "orders")).to_contain_text("Running")
    expect(
        queue_state(page, "orders").get_by_role("button", name="Pause")
    ).to_be_visible()
    assert shop.manage("delayq_queue", "list").strip() == "no queue is paused"


def statuses(db: Path, name: str) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT status, count(*) FROM django_delayq_delayedtask WHERE name = ? "
            "GROUP BY status",
            (name,),
        ).fetchall()
    return dict(rows)


def test_an_action_on_every_matching_task_across_pages_is_confirmed_then_done(
    page: Page, shop: ExampleShop, screenshots: Path
) -> None:
    # More coupon reminders than a page of the list holds (100), and order
    # cancels the filter leaves out.
    shop.manage(
        "shell",
        "-c",
        "from django_delayq import Call, schedule_many\n"
        "from shop.tasks import coupon_remind, order_cancel\n"
        "schedule_many([Call(coupon_remind, args=[i], delay=3600) "
        "for i in range(130)])\n"
        "schedule_many([Call(order_cancel, args=[9000 + i], delay=3600) "
        "for i in range(3)])\n",
    )
    before = statuses(shop.db, "shop.tasks.order_cancel")
    log_in(page, f"{TASKS}?queue=coupons")
    page.locator("#action-toggle").check()
    page.get_by_text("Select all 130 delayed tasks").click()
    expect(page.locator(".actions .all")).to_be_visible()
    page.locator("select[name=action]").select_option("cancel_tasks")
    page.locator(".actions button[name=index]").click()

    expect(page.locator("#content-main")).to_contain_text(
        "130 of the selected tasks are scheduled or running and will be cancelled."
    )
    filters = page.locator("#delayq-filters")
    expect(filters).to_contain_text("Queue")
    expect(filters).to_contain_text("coupons")
    expect(page.locator("#content-main table").last.locator("tbody tr")).to_have_count(
        10
    )
    expect(page.locator("#content-main")).to_contain_text("…and 120 more.")
    assert statuses(shop.db, "shop.tasks.coupon_remind") == {"scheduled": 130}
    page.screenshot(path=screenshots / "bulk-confirmation.png", full_page=True)

    page.get_by_role(
        "button", name="Yes, I\N{RIGHT SINGLE QUOTATION MARK}m sure"
    ).click()
    expect(page.locator("ul.messagelist")).to_contain_text("Cancelled 130 tasks.")
    expect(page).to_have_url(re.compile(r"\?queue=coupons$"))
    first = page.locator("#result_list tbody tr").first
    expect(first.locator(".delayq-status")).to_have_text("Cancelled")
    assert statuses(shop.db, "shop.tasks.coupon_remind") == {"cancelled": 130}
    assert statuses(shop.db, "shop.tasks.order_cancel") == before
    page.screenshot(path=screenshots / "bulk-done.png", full_page=True)
