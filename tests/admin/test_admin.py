"""The admin of tasks and of the outbox, as an operator sees and uses it."""

from __future__ import annotations

import datetime
import html
import re
import uuid

import pytest
from django.contrib.admin import helpers
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection, reset_queries
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_delayq import Call, schedule, schedule_many
from django_delayq.admin import actions
from django_delayq.management import bulk
from django_delayq.models import DelayedTask, OutboxEntry, Status
from django_delayq.outbox import replay_outbox
from django_delayq.store import connection as redis_connection
from tests.support.helpers import expected_score, indexed_score, refresh
from tests.testapp.tasks import add, always_fails, order_cancel, send_reminder

pytestmark = pytest.mark.django_db(transaction=True)

#: Django's own wording, typographic apostrophe included.
SURE = 'value="Yes, I\N{RIGHT SINGLE QUOTATION MARK}m sure"'
CHANGELIST = "admin:django_delayq_delayedtask_changelist"
OUTBOX = "admin:django_delayq_outboxentry_changelist"


def text(response) -> str:
    """The page's text with tags dropped and whitespace squeezed."""
    body = re.sub(r"<[^>]+>", " ", response.content.decode())
    return re.sub(r"\s+", " ", html.unescape(body))


def results(response) -> str:
    """The text of the list's result table only (not the filters' choices)."""
    [table] = re.findall(
        r'<table id="result_list">.*?</table>', response.content.decode(), re.S
    )
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", table)))


def change_url(task: DelayedTask) -> str:
    return reverse("admin:django_delayq_delayedtask_change", args=[task.pk])


def make_failed(task: DelayedTask, **values) -> DelayedTask:
    now = timezone.now()
    defaults = {
        "last_error": "RuntimeError: card declined",
        "last_traceback": "Traceback (most recent call last):\n  ...\nRuntimeError",
    }
    DelayedTask.objects.filter(pk=task.pk).update(
        status=Status.FAILED,
        attempts=task.max_attempts,
        started_at=task.run_at + datetime.timedelta(seconds=2),
        finished_at=now,
        **{**defaults, **values},
    )
    return refresh(task)


@pytest.fixture
def operator(django_user_model):
    """A logged-in staff client with exactly the given permissions."""

    def make(*codenames: str) -> Client:
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

    return make


def post_action(client: Client, action: str, tasks, **extra) -> object:
    data = {
        "action": action,
        "_selected_action": [str(task.pk) for task in tasks],
        **extra,
    }
    return client.post(reverse(CHANGELIST), data)


# -- the list -----------------------------------------------------------------


def test_the_list_shows_name_queue_status_run_time_and_attempts(
    admin_client, redis_client
):
    schedule(order_cancel, args=[1], delay=14 * 60 + 30)
    page = text(admin_client.get(reverse(CHANGELIST)))
    assert "tests.testapp.tasks.order_cancel" in page
    assert "orders" in page
    assert "Scheduled" in page
    assert "in 15 min" in page  # 14 min 30 s away: rounded up
    assert "0/5" in page


def test_run_times_read_as_overdue_or_as_how_late_the_run_started(
    admin_client, redis_client
):
    now = timezone.now()
    late = schedule(add, args=[1, 1])
    DelayedTask.objects.filter(pk=late.pk).update(
        run_at=now - datetime.timedelta(minutes=2, seconds=10)
    )
    ran = schedule(add, args=[2, 2])
    DelayedTask.objects.filter(pk=ran.pk).update(
        status=Status.SUCCEEDED,
        attempts=1,
        created_at=now - datetime.timedelta(minutes=5),
        run_at=now - datetime.timedelta(minutes=1),
        started_at=now
        - datetime.timedelta(minutes=1)
        + datetime.timedelta(seconds=3.4),
        finished_at=now,
    )
    page = text(admin_client.get(reverse(CHANGELIST)))
    assert "overdue 2 min" in page
    assert "ran 3.4 s late" in page
    assert "1/3" in page


def test_the_list_filters_by_status_queue_and_task_name(admin_client, redis_client):
    schedule(order_cancel, args=[1], delay=60)
    schedule(send_reminder, args=[2], delay=60, queue="reports")
    failed = make_failed(schedule(add, args=[3, 3], delay=60))
    url = reverse(CHANGELIST)

    by_status = results(admin_client.get(url, {"status__exact": "failed"}))
    assert "tests.testapp.tasks.add" in by_status
    assert "order_cancel" not in by_status
    assert "reminders.send" not in by_status
    by_queue = results(admin_client.get(url, {"queue": "reports"}))
    assert "reminders.send" in by_queue
    assert "order_cancel" not in by_queue
    by_name = results(admin_client.get(url, {"name": "reminders.send"}))
    assert "reminders.send" in by_name
    assert "order_cancel" not in by_name
    assert str(failed.pk) not in by_status  # the id is not a column
    # The name filter lists the names present, the queue filter the queues.
    sidebar = text(admin_client.get(url)).split("Filter")[-1]
    for choice in ("reminders.send", "tests.testapp.tasks.add", "default", "reports"):
        assert choice in sidebar


def test_search_finds_a_task_by_full_id_key_prefix_or_part_of_its_name(
    admin_client, redis_client
):
    a = schedule(order_cancel, args=[1], delay=60, key="order-cancel:41")
    schedule(send_reminder, args=[2], delay=60, key="remind:7")
    url = reverse(CHANGELIST)

    def found(term: str) -> set[str]:
        page = admin_client.get(url, {"q": term}).content.decode()
        return set(re.findall(r'href="[^"]*/delayedtask/([0-9a-f-]{36})/change/', page))

    assert found(str(a.pk)) == {str(a.pk)}
    assert found(str(uuid.uuid4())) == set()
    assert found("order-cancel:") == {str(a.pk)}
    assert len(found("remind")) == 1
    assert len(found("tasks.order")) == 1


def test_a_page_of_the_list_costs_the_same_queries_for_3_or_60_rows(
    admin_client, redis_client
):
    url = reverse(CHANGELIST)
    for i in range(3):
        schedule(add, args=[i, i], delay=60)
    admin_client.get(url)  # warm up sessions, content types
    with CaptureQueriesContext(connection) as few:
        assert admin_client.get(url).status_code == 200
    for i in range(57):
        schedule(add, args=[i, i], delay=60)
    with CaptureQueriesContext(connection) as many:
        assert admin_client.get(url).status_code == 200
    assert len(many) == len(few)
    # No COUNT of the whole table besides the paginator's own.
    counts = [q["sql"] for q in many.captured_queries if "COUNT(" in q["sql"].upper()]
    assert len(counts) == 1


# -- a task's page ---------------------------------------------------------------


def test_the_task_page_is_read_only_and_tasks_cannot_be_added_or_deleted(
    admin_client, redis_client
):
    task = schedule(add, args=[1, 1], delay=60)
    page = admin_client.get(change_url(task))
    assert page.status_code == 200
    body = page.content.decode()
    assert 'name="_save"' not in body
    assert "deletelink" not in body
    assert admin_client.post(change_url(task), {"name": "x"}).status_code == 403
    add_url = reverse("admin:django_delayq_delayedtask_add")
    assert admin_client.get(add_url).status_code == 403
    delete_url = reverse("admin:django_delayq_delayedtask_delete", args=[task.pk])
    assert admin_client.post(delete_url, {"post": "yes"}).status_code == 403
    assert refresh(task).name == task.name
    options = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert 'value="delete_selected"' not in options


def test_the_task_page_shows_arguments_as_indented_escaped_json(
    admin_client, redis_client
):
    task = schedule(
        send_reminder,
        args=["<script>alert(1)</script>"],
        kwargs={"text": "</pre><b>x</b>"},
        delay=60,
    )
    body = admin_client.get(change_url(task)).content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "<b>x</b>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert '<pre class="delayq-pre">[\n  &quot;&lt;script&gt;' in body
    assert (
        "{\n  &quot;text&quot;: &quot;&lt;/pre&gt;&lt;b&gt;x&lt;/b&gt;&quot;\n}" in body
    )


def test_the_task_page_shows_the_metadata_as_escaped_json_and_none_as_empty(
    admin_client, redis_client
):
    task = schedule(add, args=[1, 2], delay=60, meta={"tenant": "<b>acme</b>", "n": 1})
    body = admin_client.get(change_url(task)).content.decode()
    assert "<b>acme</b>" not in body
    assert (
        '<pre class="delayq-pre">{\n  &quot;n&quot;: 1,\n  &quot;tenant&quot;: '
        "&quot;&lt;b&gt;acme&lt;/b&gt;&quot;\n}</pre>" in body
    )
    assert "Metadata" in text(admin_client.get(change_url(task)))
    plain = schedule(add, args=[1, 2], delay=60)
    assert "Metadata: {}" in text(admin_client.get(change_url(plain)))


def test_the_task_page_shows_the_timeline_error_and_traceback(
    admin_client, redis_client
):
    task = make_failed(schedule(always_fails, args=["no"], delay=60))
    page = text(admin_client.get(change_url(task)))
    for event in ("Created", "Last run due", "Last run started", "Failed"):
        assert event in page
    assert "ran 2.0 s late" in page
    assert "Runs started: 3 of 3 allowed. The last 2 were retries." in page
    assert "RuntimeError: card declined" in page
    assert "Traceback (most recent call last):" in page
    assert "3/3" in page


def test_the_task_page_shows_the_expiry_and_a_task_cancelled_by_it(
    admin_client, redis_client
):
    task = schedule(add, args=[1, 1], delay=60, expires=900)
    page = text(admin_client.get(change_url(task)))
    assert "Expires" in page
    assert "if not started in 15 min, it is cancelled instead" in page

    # A worker claimed it after its expiry, and cancelled it.
    expired_at = timezone.now() - datetime.timedelta(minutes=1)
    DelayedTask.objects.filter(pk=task.pk).update(
        expires_at=expired_at,
        status=Status.CANCELLED,
        attempts=1,
        finished_at=timezone.now(),
        last_error="expired at 2030-01-01 12:00:00 UTC, before it could start",
    )
    page = text(admin_client.get(change_url(task)))
    for event in ("Created", "Due", "Expires", "Cancelled"):
        assert event in page
    assert "passed before it could start: cancelled, not run" in page
    assert "Last run started" not in page  # nothing started
    assert "expired at 2030-01-01 12:00:00 UTC, before it could start" in page


def test_run_now_and_retry_report_a_task_whose_expiry_has_passed(
    admin_client, redis_client
):
    waiting = schedule(add, args=[1, 1], delay=3600, expires=7200)
    failed = make_failed(schedule(add, args=[2, 2], delay=60, expires=7200))
    passed = timezone.now() - datetime.timedelta(seconds=1)
    DelayedTask.objects.filter(pk__in=[waiting.pk, failed.pk]).update(expires_at=passed)
    response = post_action(admin_client, "run_tasks_now", [waiting], post="yes")
    after = text(admin_client.get(response["Location"]))
    assert refresh(waiting).run_at == waiting.run_at
    assert f"Task {waiting.pk} expired at " in after
    assert "it can no longer run, so reschedule() would change nothing" in after
    response = post_action(admin_client, "retry_tasks", [failed], post="yes")
    after = text(admin_client.get(response["Location"]))
    assert refresh(failed).status == Status.FAILED
    assert "it can no longer run, so retry() would change nothing" in after


def test_the_list_and_the_task_page_show_the_priority(admin_client, redis_client):
    task = schedule(order_cancel, args=[1], delay=60, priority=-37)
    html = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "column-priority" in html
    assert '<td class="field-priority">-37</td>' in html
    assert "-37" in text(admin_client.get(change_url(task)))


def test_the_task_page_names_the_worker_of_each_attempt(admin_client, redis_client):
    task = make_failed(
        schedule(always_fails, args=["no"], delay=60),
        worker_ids=["web-1:401:1a2b3c-0", "web-2:77:4d5e6f-3"],
    )
    page = text(admin_client.get(change_url(task)))
    assert "web-1:401:1a2b3c-0" in page
    assert "web-2:77:4d5e6f-3" in page


def test_a_task_page_stays_small_whatever_the_row_holds(admin_client, redis_client):
    # A row as an older version wrote it: errors were stored whole.
    huge = "RuntimeError: " + "e" * 5_000_000
    task = make_failed(
        schedule(always_fails, args=["no"], delay=60),
        last_error=huge,
        last_traceback="Traceback (most recent call last):\n" + "t" * 5_000_000,
    )
    DelayedTask.objects.filter(pk=task.pk).update(result={"rows": ["r" * 5_000_000]})
    response = admin_client.get(change_url(task))
    assert response.status_code == 200
    assert len(response.content) < 500_000
    assert text(response).count("characters cut ...]") == 3


def test_the_task_page_offers_the_buttons_that_apply_as_csrf_posts(
    admin_client, operator, redis_client
):
    scheduled = schedule(add, args=[1, 1], delay=60)
    body = admin_client.get(change_url(scheduled)).content.decode()
    forms = re.findall(r'<form method="post" action="([^"]+)">(.*?)</form>', body, re.S)
    actions = {url.rstrip("/").rsplit("/", 1)[-1]: inner for url, inner in forms}
    assert {"cancel", "run-now"} <= set(actions)
    assert "retry" not in actions
    assert all("csrfmiddlewaretoken" in inner for inner in actions.values())
    assert ">Cancel task</button>" in body
    assert ">Run now</button>" in body

    failed = make_failed(schedule(add, args=[2, 2], delay=60))
    body = admin_client.get(change_url(failed)).content.decode()
    assert ">Retry</button>" in body
    assert ">Cancel task</button>" not in body

    viewer = operator("view_delayedtask")
    body = viewer.get(change_url(failed)).content.decode()
    assert ">Retry</button>" not in body


# -- actions -------------------------------------------------------------------


def test_cancel_asks_for_confirmation_then_cancels_through_the_api(
    admin_client, redis_client
):
    a = schedule(order_cancel, args=[1], delay=600)
    b = schedule(order_cancel, args=[2], delay=600)
    done = schedule(add, args=[3, 3], delay=600)
    DelayedTask.objects.filter(pk=done.pk).update(status=Status.SUCCEEDED)

    confirm = post_action(admin_client, "cancel_tasks", [a, b, done])
    assert confirm.status_code == 200
    page = text(confirm)
    assert "Are you sure you want to cancel these tasks?" in page
    assert (
        "2 of the selected tasks are scheduled or running and will be cancelled."
        in page
    )
    assert "The other one is left alone." in page
    assert SURE in confirm.content.decode()
    # Nothing happened yet.
    assert refresh(a).status == Status.SCHEDULED
    assert indexed_score(redis_client, a) == expected_score(a)

    answer = post_action(admin_client, "cancel_tasks", [a, b, done], post="yes")
    assert answer.status_code == 302
    for task in (a, b):
        assert refresh(task).status == Status.CANCELLED
        assert indexed_score(redis_client, task) is None
    assert refresh(done).status == Status.SUCCEEDED
    after = text(admin_client.get(answer["Location"]))
    assert "Cancelled 2 tasks; 1 had finished and was left alone." in after
    history = LogEntry.objects.filter(object_id=str(a.pk)).get()
    assert history.get_change_message() == "Cancelled in the admin."


def test_cancel_covers_running_tasks(admin_client, redis_client):
    running = schedule(order_cancel, args=[1], delay=600)
    DelayedTask.objects.filter(pk=running.pk).update(status=Status.RUNNING, attempts=1)

    page = text(post_action(admin_client, "cancel_tasks", [running]))
    assert "1 of the selected tasks is scheduled or running and will be" in page
    answer = post_action(admin_client, "cancel_tasks", [running], post="yes")
    row = refresh(running)
    assert (row.status, row.last_error) == (
        Status.CANCELLED,
        "cancelled while running (attempt 1)",
    )
    assert "Cancelled 1 task." in text(admin_client.get(answer["Location"]))


def test_run_now_moves_the_run_time_and_the_redis_score(admin_client, redis_client):
    task = schedule(order_cancel, args=[1], delay=3600)
    post_action(admin_client, "run_tasks_now", [task])
    assert refresh(task).run_at == task.run_at  # only asked, so far
    before = timezone.now()
    response = post_action(admin_client, "run_tasks_now", [task], post="yes")
    row = refresh(task)
    second = datetime.timedelta(seconds=1)
    assert before - second <= row.run_at <= timezone.now() + second
    assert indexed_score(redis_client, row) == expected_score(row)
    assert "Set 1 task to run now." in text(admin_client.get(response["Location"]))


def test_retry_reschedules_failed_tasks_and_reports_a_held_key(
    admin_client, redis_client
):
    plain = make_failed(schedule(add, args=[1, 1], delay=60))
    keyed = make_failed(schedule(add, args=[2, 2], delay=60, key="invoice:9"))
    holder = schedule(add, args=[3, 3], delay=60, key="invoice:9")

    page = text(post_action(admin_client, "retry_tasks", [plain, keyed, holder]))
    assert "2 of the selected tasks have failed and will be retried." in page

    response = post_action(
        admin_client, "retry_tasks", [plain, keyed, holder], post="yes"
    )
    row = refresh(plain)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 0)
    assert indexed_score(redis_client, row) == expected_score(row)
    assert refresh(keyed).status == Status.FAILED
    after = text(admin_client.get(response["Location"]))
    assert "Retried 1 failed task; 1 had not failed and was left alone." in after
    assert f"its key='invoice:9' is held by scheduled task {holder.pk}" in after


def test_select_all_across_pages_acts_on_the_filtered_list(admin_client, redis_client):
    orders = [schedule(order_cancel, args=[i], delay=600) for i in range(3)]
    other = schedule(add, args=[1, 1], delay=600)
    url = reverse(CHANGELIST) + "?queue=orders"
    data = {
        "action": "cancel_tasks",
        "_selected_action": [str(orders[0].pk)],
        "select_across": "1",
    }
    confirm = admin_client.post(url, data)
    assert (
        "3 of the selected tasks are scheduled or running and will be cancelled."
        in text(confirm)
    )
    assert 'name="select_across" value="1"' in confirm.content.decode()
    admin_client.post(url, {**data, "post": "yes"})
    assert all(refresh(t).status == Status.CANCELLED for t in orders)
    assert refresh(other).status == Status.SCHEDULED


def many(count: int, task=order_cancel, **options) -> list[DelayedTask]:
    """``count`` tasks scheduled in one write."""
    arguments = (lambda i: [i, i]) if task is add else (lambda i: [i])
    return schedule_many(
        [Call(task, args=arguments(i), delay=600, **options) for i in range(count)]
    )


def confirmation_rows(response) -> list[str]:
    """The ids of the tasks the confirmation page lists."""
    return re.findall(
        r'href="[^"]*/delayedtask/([0-9a-f-]{36})/change/"', response.content.decode()
    )


def test_the_confirmation_shows_the_count_the_filters_and_a_sample(
    admin_client, redis_client
):
    orders = many(130)
    other = many(3, task=add, queue="orders")  # another name, same queue
    url = reverse(CHANGELIST) + "?queue=orders&name=tests.testapp.tasks.order_cancel"
    listed = admin_client.get(url).content.decode()
    assert "Select all 130" in re.sub(r"\s+", " ", listed)
    data = {
        "action": "cancel_tasks",
        "_selected_action": [str(t.pk) for t in orders[-100:]],  # the page
        "select_across": "1",
    }
    confirm = admin_client.post(url, data)
    page = text(confirm)
    assert "130 selected tasks (the first 10 shown)" in page
    assert (
        "130 of the selected tasks are scheduled or running and will be cancelled."
        in page
    )
    assert (
        "Filters in force Queue orders Task name tests.testapp.tasks.order_cancel"
        in (page)
    )
    # A sample, in the list's order: the newest first.
    newest = sorted(orders, key=lambda t: t.pk, reverse=True)[:10]
    assert confirmation_rows(confirm) == [str(t.pk) for t in newest]
    assert "…and 120 more." in page
    body = confirm.content.decode()
    # The answer goes back to the same filtered list, with the selection.
    assert re.search(r'<form method="post" action="([^"]+)">', body).group(1) == (
        html.escape(url)
    )
    assert 'name="select_across" value="1"' in body
    assert 'name="action" value="cancel_tasks"' in body
    assert body.count(f'name="{helpers.ACTION_CHECKBOX_NAME}"') == 100
    assert f'href="{html.escape(url)}" class="button cancel-link"' in body
    assert all(refresh(t).status == Status.SCHEDULED for t in orders + other)


def test_select_all_across_pages_acts_on_every_matching_task_in_batches(
    admin_client, redis_client, monkeypatch
):
    monkeypatch.setattr(bulk, "BATCH_SIZE", 50)
    orders = many(130)
    finished = orders[:4]
    DelayedTask.objects.filter(pk__in=[t.pk for t in finished]).update(
        status=Status.SUCCEEDED
    )
    elsewhere = many(5, task=send_reminder, queue="reports")
    url = reverse(CHANGELIST) + "?queue=orders"
    data = {
        "action": "cancel_tasks",
        "_selected_action": [str(t.pk) for t in orders[-100:]],
        "select_across": "1",
        "post": "yes",
    }
    # The request's start empties the log of queries: count from there.
    reset_queries()
    with CaptureQueriesContext(connection) as queries:
        answer = admin_client.post(url, data)
    # The ids were read 50 at a time (three pages of ids and the empty end
    # at most), never all at once (read
    # before the next request empties the log).
    id_reads = [
        q["sql"]
        for q in queries.captured_queries
        if "LIMIT 50" in q["sql"] and "django_delayq_delayedtask" in q["sql"]
    ]
    assert 3 <= len(id_reads) <= 4
    assert answer.status_code == 302
    assert answer["Location"] == url  # back to the filtered list
    after = text(admin_client.get(answer["Location"]))
    assert "Cancelled 126 tasks; 4 had finished and were left alone." in after
    statuses = dict(
        DelayedTask.objects.filter(pk__in=[t.pk for t in orders]).values_list(
            "pk", "status"
        )
    )
    assert list(statuses.values()).count(Status.CANCELLED) == 126
    assert {statuses[t.pk] for t in finished} == {Status.SUCCEEDED}
    assert all(indexed_score(redis_client, t) is None for t in orders[4:])
    # The filters held: the other queue's tasks are untouched.
    for task in elsewhere:
        assert refresh(task).status == Status.SCHEDULED
        assert indexed_score(redis_client, task) == expected_score(task)
    assert LogEntry.objects.count() == 126


def test_run_now_and_retry_across_pages_skip_tasks_in_another_state(
    admin_client, redis_client
):
    waiting = many(110, task=add, queue="reports")
    failed = [make_failed(t) for t in many(3, task=add, queue="reports")]
    url = reverse(CHANGELIST) + "?queue=reports"
    base = {"_selected_action": [str(waiting[0].pk)], "select_across": "1"}
    answer = admin_client.post(
        url, {**base, "action": "run_tasks_now", "post": "yes"}, follow=True
    )
    assert (
        "Set 110 tasks to run now; 3 were no longer scheduled and were left alone."
        in (text(answer))
    )
    assert all(refresh(t).run_at < t.run_at for t in waiting)
    answer = admin_client.post(
        url, {**base, "action": "retry_tasks", "post": "yes"}, follow=True
    )
    assert "Retried 3 failed tasks; 110 had not failed and were left alone." in text(
        answer
    )
    assert {refresh(t).status for t in failed} == {Status.SCHEDULED}


def test_the_first_refusals_are_reported_one_by_one_and_the_rest_counted(
    admin_client, redis_client
):
    expired = many(7, task=add, queue="reports", expires=7200)
    passed = timezone.now() - datetime.timedelta(seconds=1)
    DelayedTask.objects.filter(pk__in=[t.pk for t in expired]).update(expires_at=passed)
    answer = admin_client.post(
        reverse(CHANGELIST) + "?queue=reports",
        {
            "action": "run_tasks_now",
            "_selected_action": [str(expired[0].pk)],
            "select_across": "1",
            "post": "yes",
        },
        follow=True,
    )
    page = text(answer)
    assert "Set 0 tasks to run now." in page
    assert page.count(" expired at ") == actions.REPORTED
    assert "2 more tasks were refused too." in page
    assert all(refresh(t).run_at == t.run_at for t in expired)


def test_taking_the_confirmation_back_changes_nothing(admin_client, redis_client):
    orders = many(120)
    year = orders[0].run_at.year
    url = (
        reverse(CHANGELIST)
        + f"?status__exact=scheduled&q=order_cancel&run_at__year={year}&o=-2"
    )
    data = {
        "action": "cancel_tasks",
        "_selected_action": [str(orders[0].pk)],
        "select_across": "1",
    }
    confirm = admin_client.post(url, data)
    assert (
        f"Filters in force Status Scheduled Search order_cancel Run at {year} "
        in text(confirm)
    )
    assert "120 selected tasks" in text(confirm)
    back = re.search(
        r'<a href="([^"]+)" class="button cancel-link">', confirm.content.decode()
    ).group(1)
    listed = admin_client.get(html.unescape(back))
    assert listed.status_code == 200
    assert "120 selected tasks" not in text(listed)
    assert {refresh(t).status for t in orders} == {Status.SCHEDULED}
    assert not LogEntry.objects.exists()


def test_a_task_page_button_confirms_then_acts_and_returns_to_the_task(
    admin_client, redis_client
):
    task = schedule(order_cancel, args=[1], delay=600)
    url = reverse("admin:django_delayq_delayedtask_cancel", args=[task.pk])
    assert SURE in admin_client.get(url).content.decode()
    confirm = admin_client.post(url)
    assert "Are you sure you want to cancel these tasks?" in text(confirm)
    assert refresh(task).status == Status.SCHEDULED
    answer = admin_client.post(url, {"post": "yes"})
    assert answer.status_code == 302
    assert answer["Location"] == change_url(task)
    assert refresh(task).status == Status.CANCELLED
    assert indexed_score(redis_client, task) is None
    assert "Cancelled 1 task." in text(admin_client.get(answer["Location"]))


def test_actions_are_posts_protected_by_csrf(admin_user, redis_client):
    task = schedule(order_cancel, args=[1], delay=600)
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    url = reverse("admin:django_delayq_delayedtask_cancel", args=[task.pk])
    assert client.post(url, {"post": "yes"}).status_code == 403
    assert post_action(client, "cancel_tasks", [task], post="yes").status_code == 403
    assert refresh(task).status == Status.SCHEDULED


@pytest.mark.parametrize(
    ("action", "permission", "url_name"),
    [
        ("cancel_tasks", "cancel_delayedtask", "cancel"),
        ("run_tasks_now", "run_delayedtask", "run"),
        ("retry_tasks", "retry_delayedtask", "retry"),
    ],
)
def test_each_action_needs_its_own_permission(
    operator, redis_client, action, permission, url_name
):
    task = schedule(order_cancel, args=[1], delay=600)
    if action == "retry_tasks":
        task = make_failed(task)
    others = {"cancel_delayedtask", "run_delayedtask", "retry_delayedtask"}
    without = operator("view_delayedtask", *sorted(others - {permission}))
    options = without.get(reverse(CHANGELIST)).content.decode()
    assert f'value="{action}"' not in options
    response = post_action(without, action, [task], post="yes")
    assert "No action selected." in text(without.get(response["Location"]))
    url = reverse(f"admin:django_delayq_delayedtask_{url_name}", args=[task.pk])
    assert without.post(url, {"post": "yes"}).status_code == 403
    assert without.get(url).status_code == 403
    assert refresh(task).status == task.status
    assert refresh(task).run_at == task.run_at

    allowed = operator("view_delayedtask", permission)
    assert f'value="{action}"' in allowed.get(reverse(CHANGELIST)).content.decode()
    post_action(allowed, action, [task], post="yes")
    assert refresh(task).status != task.status or refresh(task).run_at < task.run_at


def test_staff_without_view_permission_cannot_see_tasks(operator, redis_client):
    task = schedule(add, args=[1, 1], delay=60)
    nobody = operator()
    assert nobody.get(reverse(CHANGELIST)).status_code == 403
    assert nobody.get(change_url(task)).status_code == 403


# -- the outbox --------------------------------------------------------------------


@pytest.mark.redis_down
def test_the_outbox_list_and_replay_now_despite_the_backoff(
    admin_client, private_redis
):
    private_redis.stop()
    task = schedule(order_cancel, args=[1], delay=900)
    assert replay_outbox().failed == 1  # now backing off for a second or more
    entry = OutboxEntry.objects.get()

    page = text(admin_client.get(reverse(OUTBOX)))
    assert "schedule" in page
    assert str(task.pk) in page
    assert f"orders:{task.shard}" in page
    assert "ConnectionError" in page
    assert "in 1 s" in page or "due" in page

    # Still down: the entry stays and the operator is told why.
    response = admin_client.post(
        reverse(OUTBOX), {"action": "replay_outbox", "_selected_action": [entry.pk]}
    )
    assert "Redis refused the replay (ConnectionError" in text(
        admin_client.get(response["Location"])
    )
    assert OutboxEntry.objects.get().attempts == 2

    private_redis.start()
    redis_connection.reset()
    response = admin_client.post(
        reverse(OUTBOX), {"action": "replay_outbox", "_selected_action": [entry.pk]}
    )
    assert "Replayed 1 outbox entry" in text(admin_client.get(response["Location"]))
    assert not OutboxEntry.objects.exists()
    assert indexed_score(redis_connection.get_client(), task) == expected_score(task)


@pytest.mark.redis_down
def test_replaying_the_outbox_needs_its_permission(operator, private_redis):
    private_redis.stop()
    schedule(order_cancel, args=[1], delay=900)
    entry = OutboxEntry.objects.get()
    viewer = operator("view_outboxentry")
    assert 'value="replay_outbox"' not in viewer.get(reverse(OUTBOX)).content.decode()
    viewer.post(
        reverse(OUTBOX), {"action": "replay_outbox", "_selected_action": [entry.pk]}
    )
    assert OutboxEntry.objects.get().attempts == 0  # not even tried
    replayer = operator("view_outboxentry", "replay_outboxentry")
    assert 'value="replay_outbox"' in replayer.get(reverse(OUTBOX)).content.decode()
    add_url = reverse("admin:django_delayq_outboxentry_add")
    assert replayer.get(add_url).status_code == 403


def test_our_pages_draw_breadcrumbs_as_this_django_draws_its_own(
    admin_client, redis_client
):
    task = schedule(add, args=[1, 2], delay=60)
    own = admin_client.get(change_url(task)).content.decode()
    # Django 6 writes a list, earlier versions links separated by &rsaquo;.
    [container] = re.findall(r'<(ol|div) class="breadcrumbs">', own)
    dashboard = admin_client.get(reverse("admin:django_delayq_dashboard"))
    confirm = admin_client.post(
        reverse("admin:django_delayq_delayedtask_cancel", args=[task.pk])
    )
    for page in (dashboard, confirm):
        html_text = page.content.decode()
        assert re.findall(r'<(ol|div) class="breadcrumbs">', html_text) == [container]
        crumbs = html_text.split('class="breadcrumbs">')[1].split(f"</{container}>")[0]
        labels = [
            html.unescape(label.strip()) for label in re.findall(r">([^<>]+)<", crumbs)
        ]
        assert [label for label in labels if label not in ("", "\u203a")][:3] == [
            "Home",
            "Delay queue",
            "Delayed tasks",
        ]
