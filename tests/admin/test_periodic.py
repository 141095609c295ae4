"""The periodic schedules' admin page, as an operator sees and uses it."""

from __future__ import annotations

import datetime
import html
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_delayq import schedule
from django_delayq.models import DelayedTask, PeriodicSchedule, Status
from django_delayq.recurring.planner import plan
from django_delayq.recurring.ticks import tick_text
from tests.support.helpers import declared_schedule
from tests.testapp.tasks import count_run, record_tick

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "admin:django_delayq_periodicschedule_changelist"
TASKS = "admin:django_delayq_delayedtask_changelist"


def results(response: Any) -> str:
    """The text of the list's result table, tags dropped."""
    [table] = re.findall(
        r'<table id="result_list">.*?</table>', response.content.decode(), re.S
    )
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", table)))


def row_text(response: Any, name: str) -> str:
    """The text of the list's row of one schedule."""
    rows = re.findall(r"<tr.*?</tr>", response.content.decode(), re.S)
    [row] = [row for row in rows if f">{name}<" in row]
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", row))).strip()


@pytest.fixture
def two_schedules() -> Iterator[Any]:
    """One schedule of each kind, planned once as a dispatcher would."""
    with (
        declared_schedule(
            "close-carts", count_run, every=datetime.timedelta(seconds=30)
        ) as carts,
        declared_schedule(
            "digest", record_tick, cron="0 8 * * *", timezone="Asia/Shanghai"
        ),
    ):
        plan()
        yield carts


def last_tick(carts: Any, status: str) -> DelayedTask:
    """A tick of close-carts a minute ago, ended with ``status``."""
    now = timezone.now()
    moment = now.replace(microsecond=0) - datetime.timedelta(
        seconds=60 + now.second % 30
    )
    task = schedule(carts, key=f"periodic:close-carts@{tick_text(moment)}")
    DelayedTask.objects.filter(pk=task.pk).update(
        run_at=moment, status=status, finished_at=now
    )
    return task


def test_the_list_shows_when_each_schedule_ticks_and_its_last_outcome(
    admin_client, redis_client, two_schedules
):
    tick = last_tick(two_schedules, Status.FAILED)
    # The tick planned a few seconds ahead may fall due while the page is
    # made, and be the last one shown: only the failed one stays.
    DelayedTask.objects.filter(
        key__startswith="periodic:close-carts@", run_at__gt=tick.run_at
    ).delete()
    page = admin_client.get(reverse(LIST))
    carts = row_text(page, "close-carts")
    assert "every 30 s catch up: latest" in carts
    # "due now" when the page falls in the moment before a tick.
    assert re.search(r"\d\d:\d\d:(00|30) \w+ (in \d+ s|due now)", carts), carts
    assert "Failed" in carts
    assert " no " in f"{carts} "  # not behind
    tick_url = reverse("admin:django_delayq_delayedtask_change", args=[tick.pk])
    assert f'href="{tick_url}"' in page.content.decode()
    digest = row_text(page, "digest")
    assert "cron 0 8 * * * in Asia/Shanghai catch up: latest" in digest
    assert "08:00:00" in digest or "00:00:00 UTC" in digest
    assert " - " in digest  # no tick yet


def test_the_ticks_link_lists_that_schedules_ticks(
    admin_client, redis_client, two_schedules
):
    tick = last_tick(two_schedules, Status.SUCCEEDED)
    page = admin_client.get(reverse(LIST)).content.decode()
    [link] = re.findall(r'href="([^"]*\?q=periodic%3Aclose-carts%40)"', page)
    listed = admin_client.get(html.unescape(link))
    keys = set(re.findall(r"periodic:[\w-]+@[\d:TZ.-]+", results(listed)))
    assert tick.key in keys
    assert keys
    assert all(key.startswith("periodic:close-carts@") for key in keys)
    assert keys == set(
        DelayedTask.objects.filter(key__startswith="periodic:close-carts@").values_list(
            "key", flat=True
        )
    )


def test_a_schedule_behind_is_flagged(admin_client, redis_client, two_schedules):
    PeriodicSchedule.objects.filter(name="digest").update(
        planned_through=timezone.now() - datetime.timedelta(minutes=1)
    )
    page = admin_client.get(reverse(LIST))
    assert "behind: nothing plans it" in row_text(page, "digest")
    assert "behind" not in row_text(page, "close-carts")


def test_without_any_schedule_the_page_is_an_empty_list(admin_client):
    page = admin_client.get(reverse(LIST))
    assert page.status_code == 200
    assert "0 periodic schedules" in page.content.decode()


def test_schedules_are_read_only(admin_client, redis_client, two_schedules):
    assert admin_client.get(reverse(f"{LIST[:-10]}add")).status_code == 403
    change = reverse("admin:django_delayq_periodicschedule_change", args=["digest"])
    page = admin_client.get(change)
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
    assert "cron 0 8 * * * in Asia/Shanghai" in page.content.decode()
    delete = reverse("admin:django_delayq_periodicschedule_delete", args=["digest"])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert PeriodicSchedule.objects.filter(name="digest").exists()


def operator(django_user_model: Any, *codenames: str) -> Client:
    user = django_user_model.objects.create_user(
        f"operator-{uuid.uuid4().hex[:8]}", password="unused", is_staff=True
    )
    perms = Permission.objects.filter(
        content_type__app_label="django_delayq", codename__in=codenames
    )
    assert perms.count() == len(codenames), "a permission is missing"
    user.user_permissions.add(*perms)
    client = Client()
    client.force_login(user)
    return client


def act(client: Client, action: str, *names: str) -> Any:
    return client.post(
        reverse(LIST),
        {"action": action, "_selected_action": list(names)},
        follow=True,
    )


def test_pause_and_resume_need_their_permission(
    django_user_model, redis_client, two_schedules
):
    viewer = operator(django_user_model, "view_periodicschedule")
    page = viewer.get(reverse(LIST)).content.decode()
    assert 'value="pause_schedules"' not in page
    act(viewer, "pause_schedules", "close-carts")  # forged: no such action
    assert not PeriodicSchedule.objects.get(name="close-carts").paused

    allowed = operator(
        django_user_model, "view_periodicschedule", "pause_periodicschedule"
    )
    page = allowed.get(reverse(LIST)).content.decode()
    assert 'value="pause_schedules"' in page
    assert 'value="resume_schedules"' in page
    answer = act(allowed, "pause_schedules", "close-carts")
    # The ticks not yet due at the pause were cancelled (a tick planned a
    # few seconds ahead may have fallen due before it: it stays), and the
    # message says how many.
    future = DelayedTask.objects.filter(
        key__startswith="periodic:close-carts@", status=Status.CANCELLED
    ).count()
    assert not DelayedTask.objects.filter(
        key__startswith="periodic:close-carts@",
        status=Status.SCHEDULED,
        run_at__gt=PeriodicSchedule.objects.get(name="close-carts").paused_at,
    ).exists()
    assert (
        "Paused 1 schedule: it writes no ticks until it is resumed "
        f"({future} tick{'s' if future != 1 else ''} not yet due "
        f"{'were' if future != 1 else 'was'} cancelled)."
    ) in html.unescape(answer.content.decode())
    assert PeriodicSchedule.objects.get(name="close-carts").paused
    assert "paused" in row_text(answer, "close-carts")
    answer = act(allowed, "resume_schedules", "close-carts", "digest")
    assert (
        "Resumed 1 schedule from its next tick; the ticks that fell in the "
        "pause are skipped. 1 was not paused."
    ) in html.unescape(answer.content.decode())
    assert not PeriodicSchedule.objects.get(name="close-carts").paused


def test_the_list_without_time_zone_support(admin_client, redis_client, settings):
    """USE_TZ = False: the rows hold naive local times; the list shows them."""
    settings.USE_TZ = False
    settings.TIME_ZONE = "Europe/Berlin"
    with declared_schedule(
        "close-carts", count_run, every=datetime.timedelta(seconds=30)
    ):
        plan()
        page = admin_client.get(reverse(LIST))
        assert page.status_code == 200
        carts = row_text(page, "close-carts")
        # Local time (Berlin), as Django shows naive times.
        assert re.search(r"\d\d:\d\d:(00|30) (in \d+ s|due now)", carts), carts
        assert " no " in f"{carts} "  # not behind
