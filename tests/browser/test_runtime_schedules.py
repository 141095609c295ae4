"""A periodic schedule defined in the admin, in headless Chromium, kept by
the example shop's real planners (its dispatcher, a second dispatcher and
its sweeper) and run by its real worker: added (after the form refused a
definition that cannot plan), changed, then disabled with the admin's
action; every tick it wrote ran exactly once, and the admin's log says who
did what.

The task is the shop's ``close-stale-orders``: one UPDATE, usually of
nothing, so cheap and safe to run every second.
"""

from __future__ import annotations

import datetime
import itertools
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from django_delayq.recurring.ticks import parse_tick_key, tick_prefix
from tests.acceptance.processes import ExampleShop
from tests.acceptance.shop_database import moment
from tests.browser.test_example_shop import log_in
from tools.procs import ROOT, Process, wait_for

pytestmark = pytest.mark.timeout(300)

SCHEDULES = "/admin/django_delayq/runtimeschedule/"
NAME = "sweep-stale-orders"
TASK = "close-stale-orders"
#: The changed definition's priority: it tells its ticks' rows from those
#: the first definition wrote.
PRIORITY = 5
#: How many ticks of each definition must run.
TICKS = 4
#: Generous, for a busy machine: a tick runs within a second or two.
RUNS_WITHIN = 90
#: Longer than the planners write ahead (5 s) and than several of their
#: rounds (a dispatcher plans about once a second).
QUIET_WINDOW = 8


@dataclass(frozen=True)
class Tick:
    key: str
    due: datetime.datetime
    run_at: datetime.datetime
    status: str
    attempts: int
    priority: int
    name: str


@pytest.fixture(scope="module")
def second_dispatcher(shop: ExampleShop) -> Iterator[Process]:
    """Another dispatcher of the shop, started the way the shop starts its
    own: two dispatchers plan every schedule at the same moments."""
    process = Process(
        shop.commands["dispatcher"],
        log_path=shop.directory / "dispatcher-2.log",
        env=shop.env,
        cwd=ROOT,
        label="dispatcher-2",
        grace=20.0,
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()
        # Shown by pytest only when a test failed.
        print(f"---- dispatcher-2 ----\n{process.log()}")


def ticks(shop: ExampleShop) -> list[Tick]:
    """The rows of the schedule's ticks, by key."""
    rows = shop.database.query(
        'SELECT "key", run_at, status, attempts, priority, name '
        'FROM django_delayq_delayedtask WHERE "key" LIKE ? ORDER BY "key"',
        (tick_prefix(NAME) + "%",),
    )
    found = []
    for key, run_at, status, attempts, priority, name in rows:
        parsed = parse_tick_key(key)
        assert parsed is not None, f"{key!r} is no tick's key"
        assert parsed[0] == NAME, key
        found.append(
            Tick(key, parsed[1], moment(run_at), status, attempts, priority, name)
        )
    return found


def ran(shop: ExampleShop, priority: int) -> list[Tick]:
    """The succeeded ticks of the definition of ``priority``."""
    return [
        t for t in ticks(shop) if t.status == "succeeded" and t.priority == priority
    ]


def removed_at(shop: ExampleShop) -> datetime.datetime | None:
    """When a planner stopped the schedule (its PeriodicSchedule row)."""
    rows = shop.database.query(
        "SELECT removed_at FROM django_delayq_periodicschedule WHERE name = ?",
        (NAME,),
    )
    return moment(rows[0][0]) if rows and rows[0][0] is not None else None


def schedule_row(shop: ExampleShop) -> tuple[int, int | None, int | None, bool]:
    [(pk, every, priority, enabled)] = shop.database.query(
        "SELECT id, every, priority, enabled FROM django_delayq_runtimeschedule "
        "WHERE name = ?",
        (NAME,),
    )
    return pk, every, priority, bool(enabled)


def admin_log(shop: ExampleShop, pk: int) -> list[tuple[int, str, str]]:
    """The admin's log of the schedule: action flag, message, user."""
    return [
        (flag, message, user)
        for flag, message, user in shop.database.query(
            "SELECT entry.action_flag, entry.change_message, u.username "
            "FROM django_admin_log entry "
            "JOIN auth_user u ON u.id = entry.user_id "
            "JOIN django_content_type ct ON ct.id = entry.content_type_id "
            "WHERE ct.app_label = 'django_delayq' AND ct.model = 'runtimeschedule' "
            "AND entry.object_id = ? ORDER BY entry.id",
            (str(pk),),
        )
    ]


def consecutive(done: list[Tick], step: int) -> bool:
    """Whether ``done`` are the ticks of every ``step`` seconds from the
    first to the last, none left out."""
    times = sorted(t.due for t in done)
    return all(
        (later - earlier).total_seconds() == step
        for earlier, later in itertools.pairwise(times)
    )


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def test_a_schedule_added_changed_and_disabled_in_the_admin_ticks_exactly_once(
    page: Page, shop: ExampleShop, second_dispatcher: Process, screenshots: Path
) -> None:
    for name, marker in (
        ("dispatcher", " serving "),
        ("dispatcher-2", " serving "),
        ("worker", " thread(s) on "),
    ):
        wait_for(
            lambda name=name, marker=marker: marker in shop.log(name),
            60,
            f"the shop's {name} running",
        )

    # 1. Added: first refused, on the fields at fault, then saved.
    log_in(page, f"{SCHEDULES}add/")
    page.locator("#id_name").fill(NAME)
    page.locator("#id_task").select_option(TASK)
    page.locator("#id_cron").fill("61 * * * *")
    page.locator("#id_every").fill("2")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".errornote")).to_be_visible()
    expect(page.locator("ul.errorlist.nonfield")).to_contain_text(
        "needs exactly one of cron"
    )
    expect(page.locator(".field-cron ul.errorlist")).to_contain_text(
        "not a valid cron expression"
    )
    expect(page.locator(".field-every ul.errorlist")).to_have_count(0)
    page.screenshot(path=screenshots / "runtime-schedule-refused.png", full_page=True)
    assert shop.database.query("SELECT id FROM django_delayq_runtimeschedule") == []

    page.locator("#id_cron").fill("")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page).to_have_url(re.compile(re.escape(SCHEDULES) + "$"))
    expect(page.locator("ul.messagelist li.success")).to_be_visible()
    row = page.locator("#result_list tbody tr").filter(has_text=NAME)
    expect(row.locator("td.field-when_label")).to_have_text("every 2 s")
    pk, every, priority, enabled = schedule_row(shop)
    assert (every, priority, enabled) == (2, None, True)

    # 2. Its ticks run, every 2 seconds.
    wait_for(
        lambda: len(ran(shop, 0)) >= TICKS,
        RUNS_WITHIN,
        f"{TICKS} ticks of every 2 s run",
        poll=0.5,
    )

    # 3. Changed: every second, at another priority. The ticks of the new
    # definition run; those of the old one not yet due are cancelled.
    changing = now()
    page.goto(f"{SCHEDULES}{pk}/change/")
    page.locator("#id_every").fill("1")
    page.locator("#id_priority").fill(str(PRIORITY))
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator("ul.messagelist li.success")).to_be_visible()
    row = page.locator("#result_list tbody tr").filter(has_text=NAME)
    expect(row.locator("td.field-when_label")).to_have_text("every 1 s")
    assert schedule_row(shop)[1:] == (1, PRIORITY, True)
    wait_for(
        lambda: len(ran(shop, PRIORITY)) >= TICKS,
        RUNS_WITHIN,
        f"{TICKS} ticks of every 1 s run",
        poll=0.5,
    )

    # 4. Disabled with the admin's action: a planner stops it, and its
    # ticks not yet due are cancelled.
    disabling = now()
    page.goto(SCHEDULES)
    row = page.locator("#result_list tbody tr").filter(has_text=NAME)
    row.locator("input.action-select").check()
    page.locator("select[name=action]").select_option("disable_schedules")
    page.locator("button[name=index]").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text(
        "Disabled 1 schedule"
    )
    page.screenshot(path=screenshots / "runtime-schedule-disabled.png", full_page=True)
    assert schedule_row(shop)[3] is False
    wait_for(
        lambda: removed_at(shop) is not None,
        RUNS_WITHIN,
        "a planner stopping the disabled schedule",
        poll=0.5,
    )
    stopped = removed_at(shop)
    assert stopped is not None
    assert stopped >= disabling
    # The ticks already due when it stopped still run; none stays waiting.
    wait_for(
        lambda: {t.status for t in ticks(shop)} <= {"succeeded", "cancelled"},
        RUNS_WITHIN,
        "every tick of the schedule succeeded or cancelled",
        poll=0.5,
    )
    before = ticks(shop)
    assert [t for t in before if t.due > stopped and t.status != "cancelled"] == []
    # Nothing more for a while: no planner writes it a tick again.
    quiet_from = now()
    wait_for(
        lambda: (now() - quiet_from).total_seconds() >= QUIET_WINDOW,
        QUIET_WINDOW + 5,
        "the observation window",
        poll=0.5,
    )
    assert ticks(shop) == before

    # 5. Every tick ran exactly once.
    assert {t.name for t in before} == {TASK}
    assert all(t.run_at == t.due for t in before), before
    done = [t for t in before if t.status == "succeeded"]
    assert Counter(t.key for t in done).most_common(1)[0][1] == 1
    assert {t.attempts for t in done} == {1}
    cancelled = [t for t in before if t.status == "cancelled"]
    assert {t.attempts for t in cancelled} <= {0}  # never started
    # A key in two rows: a tick of the first definition cancelled by the
    # change, written again by the new definition at the same second.
    for key, count in Counter(t.key for t in before).items():
        if count == 1:
            continue
        rows = sorted((t for t in before if t.key == key), key=lambda t: t.priority)
        assert [(t.priority, t.status) for t in rows] in (
            [(0, "cancelled"), (PRIORITY, "succeeded")],
            [(0, "cancelled"), (PRIORITY, "cancelled")],
        ), rows
        assert rows[0].due > changing, rows
    first = ran(shop, 0)
    second = ran(shop, PRIORITY)
    assert len(first) >= TICKS
    assert len(second) >= TICKS
    # Each definition's ticks, one after the other, none missed, none twice.
    assert all(t.due.second % 2 == 0 for t in first), first
    assert any(t.due.second % 2 for t in second), second
    assert consecutive(first, 2), first
    assert consecutive(second, 1), second
    assert max(t.due for t in first) < min(t.due for t in second)
    assert min(t.due for t in second) > changing
    assert max(t.due for t in second) <= stopped
    # What was cancelled was not yet due when its definition changed or
    # was disabled.
    for tick in cancelled:
        since = changing if tick.priority == 0 else disabling
        assert tick.due > since, tick

    # The admin's log: the add, the change and the action, by the user.
    entries = admin_log(shop, pk)
    assert [(flag, user) for flag, _, user in entries] == [
        (1, "admin"),
        (2, "admin"),
        (2, "admin"),
    ], entries
    added, changed, disabled = (message for _, message, _ in entries)
    assert json.loads(added) == [{"added": {}}]
    [change] = json.loads(changed)
    assert sorted(change["changed"]["fields"]) == ["Every (seconds)", "Priority"]
    assert disabled == "Disabled."
