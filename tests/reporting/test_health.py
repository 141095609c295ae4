"""django_delayq.health: the delayq_status verdict and a reachability check in
django-health-check's views, against a real Redis, database, dispatcher,
worker and sweeper; what anonymous users and staff see of them."""

from __future__ import annotations

import datetime

import pytest
from django.contrib.auth.models import User
from django.db import connection as db_connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from health_check.exceptions import ServiceWarning

from django_delayq import schedule, status
from django_delayq.health import DelayQueue, Reachable
from django_delayq.models import DelayedTask, OutboxEntry, PeriodicSchedule
from tests.reporting.test_status import loops  # noqa: F401  (a fixture)
from tests.testapp.tasks import add

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

FULL = "DelayQueue(overdue_after=60.0)"
READY = "Reachable()"
DETAILS = "(details: manage.py delayq_status, or this page as a staff user)"


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(
        User.objects.create_user("health-staff", password="unused", is_staff=True)
    )
    return client


def health(
    url: str = "health", client: Client | None = None
) -> tuple[int, dict[str, str]]:
    response = (client or Client()).get(
        reverse(url), headers={"accept": "application/json"}
    )
    return response.status_code, response.json()


def test_healthy_passes(loops, staff) -> None:  # noqa: F811
    assert health() == (200, {FULL: "OK"})
    assert health("health-ready") == (200, {READY: "OK"})
    assert health(client=staff) == (200, {FULL: "OK"})
    page = Client().get(reverse("health"), headers={"accept": "text/html"})
    assert page.status_code == 200
    assert "DelayQueue" in page.content.decode()


def test_degraded_details_are_for_staff_only(private_redis, staff) -> None:
    # Redis and the database answer; no dispatcher, worker or sweeper runs.
    code, report = health()
    assert code == 500
    assert report == {FULL: f"Warning: degraded: 10 problem(s) {DETAILS}"}
    for url in ("health", "health-plain"):
        text = str(health(url))
        assert "orders" not in text
        assert "default:0" not in text
    code, report = health(client=staff)
    assert code == 500
    assert report[FULL].startswith("Warning: degraded: no dispatcher leases shard ")
    assert "no live worker serves queue 'orders'" in report[FULL]
    assert "no sweeper has ended a pass" in report[FULL]
    # django-health-check's own view shows nobody the details.
    assert health("health-plain", staff)[1][FULL].endswith(f"problem(s) {DETAILS}")
    # Stopped workers do not make the web process unready.
    assert health("health-ready") == (200, {READY: "OK"})


def test_redis_stopped_is_unavailable_without_its_address(private_redis, staff) -> None:
    private_redis.stop()
    port = str(private_redis.port)
    code, report = health()
    assert (code, report) == (
        500,
        {FULL: f"Unavailable: down: Redis does not answer {DETAILS}"},
    )
    code, report = health("health-ready")
    assert (code, report) == (
        500,
        {READY: f"Unavailable: Redis does not answer {DETAILS}"},
    )
    staff_full, staff_ready = health(client=staff)[1], health("health-ready", staff)[1]
    assert staff_full[FULL].startswith("Unavailable: down: Redis does not answer (")
    assert port in staff_full[FULL]
    assert staff_ready[READY].startswith("Unavailable: Redis does not answer (")
    assert port in staff_ready[READY]


def test_a_probe_reads_no_whole_table(private_redis, monkeypatch) -> None:
    """Bounded queries only: no count of every row, however many there are."""
    monkeypatch.setattr(status, "PROBE_LIMIT", 2)
    late = timezone.now() - datetime.timedelta(minutes=5)
    for _ in range(3):
        schedule(add, args=[1, 2], eta=late)
    with (
        CaptureQueriesContext(db_connection) as queries,
        pytest.raises(ServiceWarning, match="at least 2 task"),
    ):
        DelayQueue(details=True).run()
    table = DelayedTask._meta.db_table
    task_queries = [q["sql"] for q in queries if table in q["sql"]]
    assert task_queries
    for sql in task_queries:
        assert "LIMIT" in sql.upper(), sql
        assert "GROUP BY" not in sql.upper(), sql
    assert not [q for q in queries if "LIMIT" not in q["sql"].upper()]


def test_an_outbox_backlog_is_a_warning_with_its_own_threshold(private_redis) -> None:
    task = schedule(add, args=[1, 2], delay=3600)
    OutboxEntry.objects.create(
        task_id=task.pk,
        queue=task.queue,
        shard=task.shard,
        action=OutboxEntry.Action.SCHEDULE,
        created_at=timezone.now() - datetime.timedelta(minutes=5),
    )
    with pytest.raises(ServiceWarning) as raised:
        DelayQueue(details=True).run()
    assert "1 outbox entry older than 60 s" in raised.value.message
    # The threshold is the check's own, as delayq_status --overdue.
    with pytest.raises(ServiceWarning) as raised:
        DelayQueue(overdue_after=600, details=True).run()
    assert "outbox entry" not in raised.value.message


def test_checks_raise_what_django_health_check_reports(private_redis) -> None:
    from health_check.exceptions import ServiceUnavailable

    with pytest.raises(ServiceWarning, match="no dispatcher leases shard default:0"):
        DelayQueue(details=True).run()
    Reachable().run()
    private_redis.stop()
    with pytest.raises(ServiceUnavailable, match="Redis does not answer"):
        DelayQueue().run()
    with pytest.raises(ServiceUnavailable, match="Redis does not answer"):
        Reachable().run()


def test_a_probe_sees_a_periodic_schedule_behind_with_bounded_reads(
    private_redis, monkeypatch
) -> None:
    monkeypatch.setattr(status, "PROBE_LIMIT", 2)
    long_ago = timezone.now() - datetime.timedelta(minutes=5)
    for name in ("a", "b", "c"):
        PeriodicSchedule.objects.create(
            name=name, definition="every 1 s", planned_through=long_ago
        )
    with (
        CaptureQueriesContext(db_connection) as queries,
        pytest.raises(ServiceWarning, match="at least 2 periodic schedule"),
    ):
        DelayQueue(details=True).run()
    assert not [q for q in queries if "LIMIT" not in q["sql"].upper()]
