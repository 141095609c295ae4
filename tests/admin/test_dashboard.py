"""The admin dashboard: what the database and Redis say, and Redis down."""

from __future__ import annotations

import datetime
import html
import io
import json
import os
import re
import signal
import threading
import time
import uuid

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_delayq import schedule
from django_delayq.conf import get_settings
from django_delayq.models import DelayedTask, PausedQueue, Status
from django_delayq.store import streams
from django_delayq.store.keys import paused_key, shard_keys
from django_delayq.worker import Worker
from tests.testapp.tasks import add, order_cancel, send_reminder
from tools.procs import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DASHBOARD = "admin:django_delayq_dashboard"


def section(response, element_id: str) -> str:
    """The text of the dashboard module with this id, tags dropped."""
    body = response.content.decode()
    start = body.index(f'id="{element_id}"')
    chunk = body[start : body.index("</div>", start)]
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", chunk)))


def text(response) -> str:
    body = re.sub(r"<[^>]+>", " ", response.content.decode())
    return re.sub(r"\s+", " ", html.unescape(body))


def test_the_dashboard_counts_tasks_by_queue_and_status(admin_client, redis_client):
    for i in range(3):
        schedule(order_cancel, args=[i], delay=600)
    failed = schedule(add, args=[1, 1], delay=600)
    DelayedTask.objects.filter(pk=failed.pk).update(status=Status.FAILED)
    schedule(send_reminder, args=[1], delay=600, queue="reports")
    response = admin_client.get(reverse(DASHBOARD))
    assert response.status_code == 200
    counts = section(response, "delayq-counts")
    assert "Queue Scheduled Running Succeeded Failed Cancelled Total" in counts
    assert "default 0 0 0 1 0 1" in counts
    assert "orders 3 0 0 0 0 3" in counts
    assert "reports 1 0 0 0 0 1" in counts
    assert "All queues 4 0 0 1 0 5" in counts
    # Each count links to the list, filtered.
    body = response.content.decode()
    assert "?status__exact=scheduled&amp;queue=orders" in body


def test_the_dashboard_shows_overdue_tasks_and_the_worst_lateness(
    admin_client, redis_client
):
    now = timezone.now()
    old = schedule(order_cancel, args=[1])
    DelayedTask.objects.filter(pk=old.pk).update(
        run_at=now - datetime.timedelta(minutes=2, seconds=5)
    )
    recent = schedule(order_cancel, args=[2])
    DelayedTask.objects.filter(pk=recent.pk).update(
        run_at=now - datetime.timedelta(seconds=40)
    )
    schedule(order_cancel, args=[3])  # due now: within the grace, not overdue
    response = admin_client.get(reverse(DASHBOARD))
    overdue = text(response).split("overdue by more than 5 s")
    assert overdue[0].rstrip().endswith(" 2")
    assert "oldest: 2 min late" in overdue[1]
    listed = section(response, "delayq-overdue-tasks")
    assert "Oldest overdue tasks" in listed
    assert "overdue 2 min" in listed
    assert "overdue 40 s" in listed


def test_the_dashboard_reads_due_sets_streams_leases_and_workers_from_redis(
    admin_client, redis_client
):
    for i in range(3):
        schedule(add, args=[i, i])  # due now
    schedule(add, args=[9, 9], delay=3600)
    call_command("delayq_dispatch", once=True, verbosity=0)
    keys = shard_keys("delayq", "default", 0)
    # A worker thread that took one entry and has not finished it.
    streams.ensure_groups(redis_client, [keys.ready])
    redis_client.xreadgroup(
        streams.GROUP, "web-1:4242:abc123-0", {keys.ready: ">"}, count=1
    )
    redis_client.set(keys.lease, "web-1:777:0badcafe", px=30_000)
    # Its heartbeat, as a running worker writes it (and one that stopped).
    seconds, _ = redis_client.time()
    redis_client.zadd(
        "delayq:workers",
        {"web-1:4242:abc123#default": seconds * 1000 + 60_000, "web-2:1:dead00": 1},
    )

    response = admin_client.get(reverse(DASHBOARD))
    shards = section(response, "delayq-shards")
    # default:0 holds 1 in its due-set (due in an hour) and 3 in its stream,
    # of which a worker holds 1.
    assert re.search(r"default:0 1 in 1 h 2 1 0 web-1:777:0badcafe", shards)
    assert re.search(r"orders:3 0 0 0 0 none", shards)
    dispatchers = section(response, "delayq-dispatchers")
    assert "web-1:777:0badcafe default:0" in dispatchers
    workers = section(response, "delayq-workers")
    assert re.search(r"web-1:4242:abc123 1 1 1 \d+ (ms|s) ago", workers)
    assert "no heartbeat" not in workers
    # A worker whose heartbeat lapsed is not listed without a consumer: it
    # left nothing behind to look after.
    assert "web-2:1:dead00" not in workers


@pytest.mark.timeout(60)
def test_a_worker_is_alive_by_its_own_heartbeat_and_flagged_without_one(
    admin_client, redis_client
):
    worker = Worker()
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(
            lambda: [
                member
                for member in redis_client.zrange("delayq:workers", 0, -1)
                if member.decode() == f"{worker.name}#default,orders,reports"
            ],
            30,
            "the worker's heartbeat",
        )
        # Alive by its heartbeat, whatever idle time Redis reports for its
        # consumers (Redis 7.0 counts a read blocked waiting for work).
        workers = section(admin_client.get(reverse(DASHBOARD)), "delayq-workers")
        assert worker.name in workers
        assert "no heartbeat" not in workers
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not redis_client.zrange("delayq:workers", 0, -1)  # it left
    # A consumer left by a worker that was killed holding a task: no
    # heartbeat any more.
    schedule(add, args=[1, 1])
    call_command("delayq_dispatch", once=True, verbosity=0)
    keys = shard_keys("delayq", "default", 0)
    redis_client.xreadgroup(
        streams.GROUP, "web-9:13:0dead0-0", {keys.ready: ">"}, count=1
    )
    workers = section(admin_client.get(reverse(DASHBOARD)), "delayq-workers")
    assert re.search(
        r"web-9:13:0dead0 1 1 1 .* \(no heartbeat: it has stopped, or cannot "
        r"reach Redis\)",
        workers,
    )


def test_a_shard_with_due_tasks_and_no_dispatcher_is_flagged(
    admin_client, redis_client
):
    schedule(add, args=[1, 1], delay=600)
    response = admin_client.get(reverse(DASHBOARD))
    assert "none: its due tasks are not being moved" in section(
        response, "delayq-shards"
    )
    assert "Is delayq_dispatch running?" in text(response)
    assert "Is delayq_worker running?" in text(response)


def test_the_chart_draws_tasks_due_per_minute_over_the_next_hour(
    admin_client, redis_client
):
    start = timezone.now().replace(second=0, microsecond=0)
    in_5 = start + datetime.timedelta(minutes=5, seconds=30)
    in_30 = start + datetime.timedelta(minutes=30, seconds=10)
    for i in range(3):
        schedule(add, args=[i, i], eta=in_5)
    for i in range(2):
        schedule(add, args=[i, i], eta=in_30)
    schedule(add, args=[0, 0], eta=start + datetime.timedelta(minutes=90))
    response = admin_client.get(reverse(DASHBOARD))
    body = response.content.decode()
    chart = body.index('<svg class="delayq-chart"')
    svg = body[chart : body.index("</svg>", chart)]
    bars = re.findall(r'<rect class="delayq-bar"[^>]*><title>([^<]+)</title>', svg)
    assert bars == [
        f"{in_5:%H:%M}: 3 tasks",
        f"{in_30:%H:%M}: 2 tasks",
    ]
    assert "5 tasks due in the next hour, at most 3 in one minute" in svg
    # Axis labels: every 10 minutes, and the scale.
    ticks = re.findall(r'text-anchor="middle">(\d\d:\d\d)</text>', svg)
    assert len(ticks) == 6
    # (The page may have been drawn a minute later than this test started.)
    first = [start + datetime.timedelta(minutes=m) for m in (0, 1)]
    assert ticks[0] in {f"{minute:%H:%M}" for minute in first}
    assert ">4</text>" in svg
    # Nothing comes from elsewhere: no scripts, styles or images loaded.
    assert not re.search(r'(src|href)="(https?:)?//', body)


@pytest.mark.redis_down
def test_with_redis_down_the_dashboard_says_so_and_shows_the_database_side(
    admin_client, private_redis
):
    private_redis.stop()
    schedule(order_cancel, args=[1], delay=600)  # goes to the outbox
    response = admin_client.get(reverse(DASHBOARD))
    assert response.status_code == 200
    page = text(response)
    assert (
        f"Redis is unreachable at 127.0.0.1:{private_redis.port}/0: showing the "
        f"database side only." in page
    )
    assert "ConnectionError" in page
    assert "orders 1 0 0 0 0 1" in section(response, "delayq-counts")
    outbox = section(response, "delayq-outbox-section")
    assert "Entries waiting for a replay 1" in outbox
    assert 'id="delayq-shards"' not in response.content.decode()


@pytest.mark.redis_down
def test_with_redis_hanging_the_dashboard_answers_after_the_short_timeout(
    admin_client, private_redis
):
    schedule(order_cancel, args=[1], delay=600)
    os.kill(private_redis.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        response = admin_client.get(reverse(DASHBOARD))
        elapsed = time.monotonic() - started
    finally:
        os.kill(private_redis.pid, signal.SIGCONT)
    page = text(response)
    assert "Redis is unreachable at" in page
    assert "TimeoutError" in page
    assert "orders 1 0 0 0 0 1" in section(response, "delayq-counts")
    # REDIS_TIMEOUT is 0.25 s: one round trip, not one per shard.
    assert elapsed < 10


def test_the_dashboard_needs_the_view_permission(django_user_model, redis_client):
    url = reverse(DASHBOARD)
    assert Client().get(url).status_code == 302  # to the login page
    user = django_user_model.objects.create_user(
        f"op-{uuid.uuid4().hex[:6]}", password="unused", is_staff=True
    )
    client = Client()
    client.force_login(user)
    assert client.get(url).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_delayedtask"))
    assert client.get(url).status_code == 200


def test_the_dashboard_is_linked_from_the_task_list_and_the_app_index(
    admin_client, redis_client, django_user_model
):
    url = reverse(DASHBOARD)
    assert url.endswith("/django_delayq/delayedtask/dashboard/")
    changelist = admin_client.get(reverse("admin:django_delayq_delayedtask_changelist"))
    assert f'href="{url}"' in changelist.content.decode()
    app_index = admin_client.get(
        reverse("admin:app_list", kwargs={"app_label": "django_delayq"})
    )
    assert f'href="{url}"' in app_index.content.decode()
    index = admin_client.get(reverse("admin:index")).content.decode()
    assert f'href="{url}"' in index
    # Still the admin's own index around it: the apps are listed.
    assert 'id="content-main"' in index
    assert "Delay queue" in index
    # A user who may not see the dashboard is not shown the link.
    user = django_user_model.objects.create_user(
        f"staff-{uuid.uuid4().hex[:6]}", password="unused", is_staff=True
    )
    client = Client()
    client.force_login(user)
    assert f'href="{url}"' not in client.get(reverse("admin:index")).content.decode()
    page = admin_client.get(url).content.decode()
    assert 'class="breadcrumbs"' in page


def test_a_workers_shards_are_those_of_the_queues_it_reads(admin_client, redis_client):
    # A worker serving default (1 shard) and orders (4 shards), to which only
    # default:0 has delivered anything yet.
    schedule(add, args=[1, 1])
    call_command("delayq_dispatch", once=True, verbosity=0)
    keys = shard_keys("delayq", "default", 0)
    streams.ensure_groups(redis_client, [keys.ready])
    redis_client.xreadgroup(
        streams.GROUP, "web-3:99:feed01-0", {keys.ready: ">"}, count=1
    )
    seconds, _ = redis_client.time()
    redis_client.zadd(
        "delayq:workers",
        {
            "web-3:99:feed01#default,orders": seconds * 1000 + 60_000,
            "web-4:5:cafe02#reports": seconds * 1000 + 60_000,
        },
    )
    workers = section(admin_client.get(reverse(DASHBOARD)), "delayq-workers")
    # name, threads, shards, tasks in hand
    assert re.search(r"web-3:99:feed01 1 5 1 ", workers)
    assert re.search(r"web-4:5:cafe02 0 1 0 nothing yet", workers)


def test_a_redis_url_redis_py_refuses_is_explained_not_a_server_error(
    admin_client, settings, redis_server, caplog
):
    secret = "pw-s3cr3t"
    url = f"redis://:{secret}@127.0.0.1:{redis_server.port}/0?socket_timeout=abc"
    settings.DELAYQ = {"REDIS_URL": url}
    response = admin_client.get(reverse(DASHBOARD))
    assert response.status_code == 200
    shown = text(response)
    assert "The DELAYQ setting is invalid" in shown
    assert "refused by redis-py: ValueError: Invalid value for 'socket_timeout'" in (
        shown
    )
    assert "(delayq.E003)" in shown
    assert secret not in response.content.decode()
    assert secret not in caplog.text


# -- pausing and resuming queues ----------------------------------------------

QUEUE_ACTION = "admin:django_delayq_dashboard_queue"


def staff(django_user_model, *codenames: str, csrf: bool = False) -> Client:
    user = django_user_model.objects.create_user(
        f"op-{uuid.uuid4().hex[:6]}", password="unused", is_staff=True
    )
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def queue_state(response, queue: str) -> str:
    """The text of the state cell of ``queue`` in the counts table."""
    body = response.content.decode()
    start = (
        body.index(
            ">", body.index(f'<td class="delayq-queue-state" data-queue="{queue}"')
        )
        + 1
    )
    chunk = body[start : body.index("</td>", start)]
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", chunk))).strip()


def listed_paused() -> list[dict]:
    out = io.StringIO()
    call_command("delayq_queue", "list", "--json", stdout=out)
    return json.loads(out.getvalue())


def test_the_dashboard_shows_each_queue_paused_or_running_with_its_button(
    admin_client, redis_client
):
    call_command("delayq_queue", "pause", "reports", "--by", "ops", "--reason", "db")
    response = admin_client.get(reverse(DASHBOARD))
    assert queue_state(response, "orders").startswith("Running")
    assert "Pause" in queue_state(response, "orders")
    reports = queue_state(response, "reports")
    assert reports.startswith("Paused since ")
    assert reports.endswith("by ops: db Resume")
    body = response.content.decode()
    assert body.count(f'action="{reverse(QUEUE_ACTION)}"') == 3  # one per queue
    assert body.count('name="csrfmiddlewaretoken"') >= 3


def test_pause_then_resume_from_the_dashboard_writes_the_row_and_redis(
    django_user_model, redis_client
):
    operator = staff(
        django_user_model, "view_delayedtask", "change_pausedqueue", csrf=True
    )
    page = operator.get(reverse(DASHBOARD))
    token = page.cookies["csrftoken"].value
    answer = operator.post(
        reverse(QUEUE_ACTION),
        {
            "queue": "orders",
            "op": "pause",
            "reason": "migrating",
            "csrfmiddlewaretoken": token,
        },
        follow=True,
    )
    assert answer.redirect_chain[-1][0] == reverse(DASHBOARD)
    assert (
        "Queue 'orders' paused: no worker starts its tasks until it is resumed; "
        "the tasks running now finish." in text(answer)
    )
    assert queue_state(answer, "orders").endswith("migrating Resume")
    row = PausedQueue.objects.get()
    assert (row.name, row.reason) == ("orders", "migrating")
    assert row.paused_by.startswith("op-")
    assert [q["queue"] for q in listed_paused()] == ["orders"]
    mirror = paused_key(get_settings().key_prefix)
    assert redis_client.hget(mirror, "orders") is not None  # the workers see it

    again = operator.post(
        reverse(QUEUE_ACTION),
        {"queue": "orders", "op": "pause", "csrfmiddlewaretoken": token},
        follow=True,
    )
    assert "Queue 'orders' was paused already: nothing changed." in text(again)

    resumed = operator.post(
        reverse(QUEUE_ACTION),
        {"queue": "orders", "op": "resume", "csrfmiddlewaretoken": token},
        follow=True,
    )
    assert (
        "Queue 'orders' resumed: its tasks due meanwhile start, in the order "
        "they fell due." in text(resumed)
    )
    assert queue_state(resumed, "orders").startswith("Running")
    assert not PausedQueue.objects.exists()
    assert listed_paused() == []
    assert redis_client.hget(mirror, "orders") is None


def test_without_the_permission_the_state_shows_but_no_button_and_a_post_is_403(
    django_user_model, redis_client
):
    viewer = staff(django_user_model, "view_delayedtask")
    call_command("delayq_queue", "pause", "reports")
    response = viewer.get(reverse(DASHBOARD))
    assert queue_state(response, "reports").startswith("Paused since ")
    assert queue_state(response, "orders") == "Running"
    assert reverse(QUEUE_ACTION) not in response.content.decode()
    for data in (
        {"queue": "orders", "op": "pause"},
        {"queue": "reports", "op": "resume"},
    ):
        assert viewer.post(reverse(QUEUE_ACTION), data).status_code == 403
    assert [q["queue"] for q in listed_paused()] == ["reports"]
    # The permission alone does not open the dashboard's pages either.
    pauser = staff(django_user_model, "change_pausedqueue")
    assert (
        pauser.post(
            reverse(QUEUE_ACTION), {"queue": "orders", "op": "pause"}
        ).status_code
        == 403
    )
    assert [q["queue"] for q in listed_paused()] == ["reports"]


def test_a_pause_is_a_csrf_protected_post(django_user_model, redis_client):
    operator = staff(
        django_user_model, "view_delayedtask", "change_pausedqueue", csrf=True
    )
    data = {"queue": "orders", "op": "pause"}
    assert operator.post(reverse(QUEUE_ACTION), data).status_code == 403
    assert operator.get(reverse(QUEUE_ACTION), data).status_code == 405
    assert not PausedQueue.objects.exists()


def test_an_unknown_queue_is_reported_and_a_paused_one_no_longer_configured_shows(
    admin_client, redis_client
):
    answer = admin_client.post(
        reverse(QUEUE_ACTION), {"queue": "nope", "op": "pause"}, follow=True
    )
    assert "nope" in text(answer)
    assert "orders" in text(answer).split("nope", 1)[1]  # names the configured ones
    assert not PausedQueue.objects.exists()
    PausedQueue.objects.create(name="retired")
    response = admin_client.get(reverse(DASHBOARD))
    assert queue_state(response, "retired").startswith("Paused")
    resumed = admin_client.post(
        reverse(QUEUE_ACTION), {"queue": "retired", "op": "resume"}, follow=True
    )
    assert "Queue 'retired' resumed" in text(resumed)
    assert not PausedQueue.objects.exists()
