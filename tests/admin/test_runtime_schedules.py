"""The admin of the schedules defined in the database: add, change, enable,
disable and delete, each refused with a field's error when it cannot plan,
and each in the admin's log."""

from __future__ import annotations

import datetime
import html
import re
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import User
from django.urls import reverse

from django_delayq.models import DelayedTask, PeriodicSchedule, RuntimeSchedule, Status
from django_delayq.recurring.planner import plan
from tests.support.helpers import declared_schedule
from tests.testapp.tasks import count_run

pytestmark = pytest.mark.django_db(transaction=True)

ADD = reverse("admin:django_delayq_runtimeschedule_add")
LIST = reverse("admin:django_delayq_runtimeschedule_changelist")


def change_url(row: RuntimeSchedule) -> str:
    return reverse("admin:django_delayq_runtimeschedule_change", args=[row.pk])


def form(**fields: Any) -> dict[str, Any]:
    """The add form as a user fills it: every 60 s of add(1, 2)."""
    values = {
        "name": "adds",
        "task": "tests.testapp.tasks.add",
        "args": "[1, 2]",
        "kwargs": "{}",
        "cron": "",
        "every": "60",
        "time_zone": "",
        "queue": "",
        "priority": "",
        "catch_up": "latest",
        "enabled": "on",
        "expires_at_0": "",
        "expires_at_1": "",
        **fields,
    }
    return {name: value for name, value in values.items() if value is not None}


def field_errors(response: Any) -> dict[str, str]:
    """Each field's errors on the page, as text ("__all__": the form's)."""
    assert response.status_code == 200, response.status_code
    found = {
        name: str(error)
        for name, errors in response.context["adminform"].form.errors.items()
        for error in [" ".join(errors)]
    }
    assert found, "the form was accepted"
    return found


def log(row: RuntimeSchedule) -> list[tuple[int, str, str]]:
    return [
        (entry.action_flag, entry.get_change_message(), entry.user.username)
        for entry in LogEntry.objects.filter(object_id=str(row.pk)).order_by("pk")
    ]


def test_adding_a_schedule_saves_it_and_logs_who_did(admin_client, admin_user):
    response = admin_client.post(ADD, form())
    assert response.status_code == 302, field_errors(response)
    row = RuntimeSchedule.objects.get(name="adds")
    assert (row.task, row.args, row.kwargs, row.every, row.cron) == (
        "tests.testapp.tasks.add",
        [1, 2],
        {},
        60,
        "",
    )
    assert row.enabled
    assert log(row) == [(ADDITION, "Added.", admin_user.username)]
    page = admin_client.get(LIST).content.decode()
    assert "every 1 min" in page


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        ({"cron": "0 25 * * *", "every": ""}, "cron", "not a valid cron expression"),
        ({"cron": "0 8 * * *"}, "__all__", "needs exactly one of cron"),
        ({"every": ""}, "__all__", "got neither"),
        ({"task": "shop.tasks.nope"}, "task", "Select a valid choice"),
        ({"args": "[1]"}, "args", "add() missing a required argument: 'b'"),
        ({"args": "[1, 2, 3]"}, "args", "takes 2 positional arguments but 3"),
        ({"kwargs": '{"c": 1}'}, "args", "unexpected keyword argument 'c'"),
        ({"args": "{1"}, "args", "Enter a valid JSON"),
        (
            {"cron": "0 8 * * *", "every": "", "time_zone": "Europe/Nowhere"},
            "time_zone",
            "is not a time zone this machine knows",
        ),
        ({"queue": "nowhere"}, "queue", "queue='nowhere' is not configured"),
        ({"name": "a@b"}, "name", "cannot contain '@'"),
    ],
)
def test_a_definition_that_cannot_plan_is_refused_with_its_fields_error(
    admin_client, fields, field, text
):
    errors = field_errors(admin_client.post(ADD, form(**fields)))
    assert field in errors, errors
    assert text in html.unescape(errors[field])
    assert not RuntimeSchedule.objects.exists()


def test_a_name_a_code_schedule_has_is_refused(admin_client):
    with declared_schedule("carts", count_run, every=datetime.timedelta(seconds=30)):
        errors = field_errors(admin_client.post(ADD, form(name="carts")))
    assert "a schedule declared in the code" in errors["name"]


def test_a_change_is_logged_with_the_fields_and_replaces_the_ticks(
    admin_client, admin_user, redis_client
):
    row = RuntimeSchedule.objects.create(
        name="adds", task="tests.testapp.tasks.add", args=[1, 2], every=1
    )
    plan()
    before = set(
        DelayedTask.objects.filter(status=Status.SCHEDULED).values_list("pk", flat=True)
    )
    assert before
    page = admin_client.get(change_url(row)).content.decode()
    # The name is its ticks' keys: shown, not edited.
    assert 'name="name"' not in page
    fields = form(args="[3, 4]", every="1")
    del fields["name"]
    # What the page sends besides (fields of a callable default keep their
    # initial value in a hidden input, which tells what changed).
    fields.update({"initial-args": "[1, 2]", "initial-kwargs": "{}"})
    assert 'name="initial-kwargs" value="{}"' in page
    response = admin_client.post(change_url(row), fields)
    assert response.status_code == 302, field_errors(response)
    assert log(row) == [(CHANGE, "Changed Args.", admin_user.username)]
    plan()  # the next planning round
    scheduled = DelayedTask.objects.filter(
        key__startswith="periodic:adds@", status=Status.SCHEDULED
    )
    ahead = [task for task in scheduled if task.pk not in before]
    assert ahead
    assert {tuple(task.args) for task in ahead} == {(3, 4)}


def test_disable_and_enable_actions_switch_and_log(
    admin_client, admin_user, redis_client
):
    row = RuntimeSchedule.objects.create(
        name="adds", task="tests.testapp.tasks.add", args=[1, 2], every=1
    )
    other = RuntimeSchedule.objects.create(
        name="off", task="tests.testapp.tasks.add", args=[1, 2], every=1, enabled=False
    )
    plan()
    response = admin_client.post(
        LIST,
        {"action": "disable_schedules", "_selected_action": [row.pk, other.pk]},
        follow=True,
    )
    assert "Disabled 1 schedule" in response.content.decode()
    assert not RuntimeSchedule.objects.get(pk=row.pk).enabled
    assert log(row) == [(CHANGE, "Disabled.", admin_user.username)]
    assert log(other) == []  # disabled already: nothing changed, nothing logged
    plan()
    assert PeriodicSchedule.objects.get(name="adds").removed_at is not None
    assert not DelayedTask.objects.filter(
        key__startswith="periodic:adds@",
        status=Status.SCHEDULED,
        run_at__gt=PeriodicSchedule.objects.get(name="adds").removed_at,
    ).exists()
    admin_client.post(
        LIST, {"action": "enable_schedules", "_selected_action": [row.pk]}
    )
    assert RuntimeSchedule.objects.get(pk=row.pk).enabled
    assert log(row)[-1] == (CHANGE, "Enabled.", admin_user.username)


def test_the_actions_need_the_change_permission(client, redis_client):
    from django.contrib.auth.models import Permission

    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_runtimeschedule"))
    client.force_login(user)
    row = RuntimeSchedule.objects.create(
        name="adds", task="tests.testapp.tasks.add", args=[1, 2], every=1
    )
    page = client.get(LIST).content.decode()
    assert "disable_schedules" not in page
    client.post(LIST, {"action": "disable_schedules", "_selected_action": [row.pk]})
    assert RuntimeSchedule.objects.get(pk=row.pk).enabled
    assert client.post(ADD, form(name="other")).status_code == 403


def test_deleting_a_schedule_is_logged(admin_client, admin_user):
    row = RuntimeSchedule.objects.create(
        name="adds", task="tests.testapp.tasks.add", args=[1, 2], every=60
    )
    delete = reverse("admin:django_delayq_runtimeschedule_delete", args=[row.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not RuntimeSchedule.objects.exists()
    entries = LogEntry.objects.filter(object_id=str(row.pk))
    assert [(e.action_flag, e.user.username) for e in entries] == [
        (DELETION, admin_user.username)
    ]


def test_a_runtime_schedule_is_listed_with_the_code_ones_read_only(
    admin_client, redis_client
):
    RuntimeSchedule.objects.create(
        name="adds", task="tests.testapp.tasks.add", args=[1, 2], every=30
    )
    plan()
    page = admin_client.get(reverse("admin:django_delayq_periodicschedule_changelist"))
    text = re.sub(
        r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page.content.decode()))
    )
    assert "adds every 30 s catch up: latest" in text
    change = reverse("admin:django_delayq_periodicschedule_change", args=["adds"])
    assert 'name="_save"' not in admin_client.get(change).content.decode()
