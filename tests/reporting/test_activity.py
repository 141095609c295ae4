"""Per-minute activity counters: written by a real worker, drawn by the dashboard."""

from __future__ import annotations

import datetime
import re

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from django_delayq import schedule
from django_delayq.conf import get_settings
from django_delayq.models import DelayedTask
from django_delayq.store import activity
from django_delayq.worker import Worker
from tests.testapp.tasks import add, always_fails

pytestmark = pytest.mark.django_db(transaction=True)

DASHBOARD = "admin:django_delayq_dashboard"


def counters(redis_client) -> dict[str, int]:
    """Every activity counter of shard default:0, summed over its minutes."""
    total: dict[str, int] = {}
    for key in redis_client.scan_iter(match="delayq:{default:0}:activity:*"):
        for name, value in redis_client.hgetall(key).items():
            total[name.decode()] = total.get(name.decode(), 0) + int(value)
    return total


def run_workload() -> None:
    """7 tasks that succeed (2 of them started 3 s after their run_at) and 2
    attempts that fail, all on shard default:0, through a real dispatcher
    and worker."""
    late = [schedule(add, args=[i, i]) for i in range(2)]
    for i in range(5):
        schedule(add, args=[i, 1])
    for i in range(2):
        schedule(always_fails, args=[f"no {i}"])
    # Scheduled a minute ago, due 3 s ago: late by 3 s. (Due before it was
    # scheduled, a past eta, it would be late by no more than the queue took.)
    now = timezone.now()
    DelayedTask.objects.filter(pk__in=[t.pk for t in late]).update(
        run_at=now - datetime.timedelta(seconds=3),
        created_at=now - datetime.timedelta(minutes=1),
    )
    call_command("delayq_dispatch", once=True, verbosity=0)
    assert Worker(queues=["default"]).run(once=True).processed == 9


def test_a_worker_counts_started_succeeded_failed_and_lateness(redis_client):
    run_workload()
    found = counters(redis_client)
    assert found["started"] == 9
    assert found["succeeded"] == 7
    assert found["failed"] == 2
    # Two started about 3 s late (the 5 s bucket); the rest well within 1 s.
    assert found["late:5000"] == 2
    assert sum(v for k, v in found.items() if k.startswith("late:")) == 9
    on_time = sum(
        v
        for k, v in found.items()
        if k.startswith("late:") and k != "late:inf" and int(k[5:]) <= 1000
    )
    assert on_time == 7
    [key, *_] = redis_client.scan_iter(match="delayq:{default:0}:activity:*")
    assert 3600 < redis_client.ttl(key) <= activity.ACTIVITY_TTL
    minute = int(key.decode().rsplit(":", 1)[1])
    assert abs(minute * 60 - timezone.now().timestamp()) < 120


def test_every_priority_band_counts_in_its_shards_counters(redis_client):
    """A shard's high, normal and low ready streams share one hash."""
    for priority in (50, 0, -50):
        schedule(add, args=[priority, 1], priority=priority)
    call_command("delayq_dispatch", once=True, verbosity=0)
    assert Worker(queues=["default"]).run(once=True).processed == 3
    assert counters(redis_client)["succeeded"] == 3
    keys = [k.decode() for k in redis_client.scan_iter(match="delayq:*:activity:*")]
    assert keys
    assert all(re.fullmatch(r"delayq:\{default:0\}:activity:\d+", k) for k in keys)


def test_an_idle_worker_writes_no_counter(redis_client):
    call_command("delayq_dispatch", once=True, verbosity=0)
    Worker(queues=["default"]).run(once=True)
    assert not list(redis_client.scan_iter(match="delayq:*:activity:*"))


def test_the_dashboard_charts_the_counters_of_the_last_hour(admin_client, redis_client):
    run_workload()
    body = admin_client.get(reverse(DASHBOARD)).content.decode()
    start = body.index('id="delayq-activity"')
    svg = body[start : body.index("</svg>", start)]
    assert "9 tasks started in the last hour: 7 succeeded, 2 failed" in svg
    minutes = re.findall(
        r'data-started="(\d+)" data-succeeded="(\d+)" data-failed="(\d+)"', svg
    )
    # One bar per minute with activity (the workload may straddle a minute).
    assert 1 <= len(minutes) <= 2
    sums = [sum(int(m[i]) for m in minutes) for i in range(3)]
    assert sums == [9, 7, 2]
    assert 'class="delayq-bar-failed"' in svg
    start = body.index('id="delayq-lateness"')
    svg = body[start : body.index("</svg>", start)]
    p99 = [int(ms) for ms in re.findall(r'data-p99-ms="(\d+)"', svg)]
    p50 = [int(ms) for ms in re.findall(r'data-p50-ms="(\d+)"', svg)]
    if len(p99) == 1:  # one minute: 2 of 9 took 3 s, 7 well within a second
        assert p99 == [5000]
        assert p50[0] <= 1000
        assert "p99 at most 5.0 s" in svg
    else:
        assert max(p99) == 5000
    assert "<polyline" in svg


def test_the_counters_of_shards_of_several_queues_add_up(redis_client):
    now = timezone.now()
    key = activity.activity_key("delayq:{orders:2}:ready", activity.current_minute(now))
    redis_client.hset(key, mapping={"started": 3, "succeeded": 3, "late:50": 3})
    other = activity.activity_key(
        "delayq:{reports:0}:ready", activity.current_minute(now)
    )
    redis_client.hset(other, mapping={"started": 1, "failed": 1, "late:inf": 1})
    minutes = activity.read_hour(
        redis_client, "delayq", get_settings().queues.values(), now
    )
    assert len(minutes) == activity.WINDOW_MINUTES
    last = minutes[-1]
    assert (last.started, last.succeeded, last.failed) == (4, 3, 1)
    assert last.lateness_quantile(0.5) == 50
    assert last.lateness_quantile(0.99) == 600_000
    assert all(m.started == 0 for m in minutes[:-1])
