"""django_delayq.health: the delayq_status verdict in django-health-check's view,
against a real Redis, database, dispatcher and worker."""

from __future__ import annotations

import datetime

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_delayq import schedule
from django_delayq.health import DelayQueue
from django_delayq.models import OutboxEntry
from tests.integration.test_status import loops  # noqa: F401  (a fixture)
from tests.testapp.tasks import add

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

NAME = "DelayQueue(overdue_after=60.0)"


def health(accept: str = "application/json") -> tuple[int, dict[str, str] | str]:
    response = Client().get(reverse("health"), headers={"accept": accept})
    if accept == "application/json":
        return response.status_code, response.json()
    return response.status_code, response.content.decode()


def test_healthy_passes(loops) -> None:  # noqa: F811
    assert health() == (200, {NAME: "OK"})
    code, page = health("text/html")
    assert code == 200
    assert "DelayQueue" in page


def test_an_outbox_backlog_is_a_warning(loops) -> None:  # noqa: F811
    task = schedule(add, args=[1, 2], delay=3600)
    OutboxEntry.objects.create(
        task_id=task.pk,
        queue=task.queue,
        shard=task.shard,
        action=OutboxEntry.Action.SCHEDULE,
        created_at=timezone.now() - datetime.timedelta(minutes=5),
    )
    code, report = health()
    assert code == 500
    assert isinstance(report, dict)
    assert report[NAME].startswith("Warning: degraded: 1 outbox entry older than 60 s")
    # The threshold is the check's own, as delayq_status --overdue.
    DelayQueue(overdue_after=600).run()


def test_redis_stopped_is_unavailable(private_redis) -> None:
    private_redis.stop()
    code, report = health()
    assert code == 500
    assert isinstance(report, dict)
    assert report[NAME].startswith("Unavailable: down: Redis does not answer")


def test_degraded_and_down_raise_what_django_health_check_reports(
    private_redis,
) -> None:
    from health_check.exceptions import ServiceUnavailable, ServiceWarning

    # Nothing running: no dispatcher leases the shards, no worker serves.
    with pytest.raises(ServiceWarning, match="no dispatcher leases shard default:0"):
        DelayQueue().run()
    private_redis.stop()
    with pytest.raises(ServiceUnavailable, match="Redis does not answer"):
        DelayQueue().run()
