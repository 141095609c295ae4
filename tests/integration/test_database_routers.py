"""Every query and transaction of django-delayq goes to the database the
router names for writing its models, whatever it says for reads."""

from __future__ import annotations

import datetime

import pytest
from django.test import override_settings
from django.utils import timezone

from django_delayq.models import DelayedTask, PeriodicSchedule
from django_delayq.recurring.planner import pause, plan, resume
from tests.helpers import declared_schedule
from tests.testapp.tasks import record_tick

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "replica"])

SECOND = datetime.timedelta(seconds=1)


@override_settings(DATABASE_ROUTERS=["tests.routers.ReadReplicaRouter"])
def test_the_planner_reads_and_writes_the_schedules_on_the_primary(redis_client):
    # An hour ahead, so that every tick is still to come when it is paused.
    later = timezone.now() + datetime.timedelta(hours=1)
    ticks = DelayedTask.objects.using("default").filter(key__startswith="periodic:")
    with declared_schedule("ticks", record_tick, every=SECOND):
        plan(now=later)
        first = ticks.count()
        assert first >= 4
        # A round later, from the row it wrote: the compare-and-set reads
        # planned_through where it wrote it, not from the lagging replica.
        plan(now=later + 3 * SECOND)
        assert ticks.count() == first + 3
        assert pause("ticks") == first + 3
        assert resume("ticks")
    assert len(set(ticks.values_list("key", flat=True))) == first + 3
    assert PeriodicSchedule.objects.using("default").get(name="ticks")
    assert not DelayedTask.objects.using("replica").exists()
    assert not PeriodicSchedule.objects.using("replica").exists()
