"""Periodic schedules' ticks as Sentry cron check-ins, with the real SDK
and a recording transport: in_progress then ok or error, with the monitor's
configuration from the schedule, or none and one warning when Sentry cannot
express the schedule."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.utils import timezone

from django_delayq import schedule
from django_delayq.contrib.sentry import DelayqIntegration
from django_delayq.contrib.sentry.monitors import slug
from django_delayq.recurring import periodic
from django_delayq.recurring.declared import forget
from django_delayq.recurring.ticks import tick_key
from django_delayq.registry import unregister
from django_delayq.testing import run_due
from tests.support.sentry import Init
from tests.testapp.tasks import add

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

LATER = datetime.timedelta(hours=2)


class Declined(Exception):
    pass


def run_all() -> None:
    run_due(until=timezone.now() + LATER)


def test_monitor_slugs() -> None:
    assert slug("shop.Nightly Report") == "shop-nightly-report"
    assert slug("reports_daily") == "reports_daily"
    assert len(slug("x" * 80)) == 50


@pytest.fixture
def declare() -> Iterator[Callable[..., str]]:
    names: list[str] = []

    def declare_one(name: str, fn: Callable[..., Any], **options: Any) -> str:
        periodic(name=name, **options)(fn)
        names.append(name)
        return name

    yield declare_one
    for name in names:
        forget(name)
        unregister(name)


def digest() -> None:
    pass


def broken_digest() -> None:
    raise Declined("no digest")


def run_tick(name: str) -> None:
    due = timezone.now().replace(microsecond=0)
    schedule(name, key=tick_key(name, due), eta=due)
    run_all()


def test_a_cron_tick_checks_in_in_progress_then_ok(sentry: Init, declare) -> None:
    sent = sentry(DelayqIntegration(monitors=True))
    name = declare(
        "sentry.Nightly", digest, cron="30 2 * * *", timezone="Europe/Berlin"
    )
    run_tick(name)
    started, done = sent.items("check_in")
    assert (started["monitor_slug"], started["status"]) == (
        "sentry-nightly",
        "in_progress",
    )
    assert (done["status"], done["check_in_id"]) == ("ok", started["check_in_id"])
    assert done["duration"] >= 0
    assert started["monitor_config"] == {
        "schedule": {"type": "crontab", "value": "30 2 * * *"},
        "timezone": "Europe/Berlin",
        "checkin_margin": 1,
    }


def test_a_failing_interval_tick_checks_in_error(sentry: Init, declare) -> None:
    sent = sentry(DelayqIntegration(monitors=["sentry.hourly"]))
    name = declare(
        "sentry.hourly",
        broken_digest,
        every=datetime.timedelta(hours=2),
        time_limit=90,
        max_attempts=2,
    )
    run_tick(name)
    checkins = sent.items("check_in")
    # Each attempt: in progress, then error (the retry, then the failure).
    assert [c["status"] for c in checkins] == ["in_progress", "error"] * 2
    assert checkins[0]["check_in_id"] == checkins[1]["check_in_id"]
    assert checkins[2]["check_in_id"] == checkins[3]["check_in_id"]
    assert checkins[0]["check_in_id"] != checkins[2]["check_in_id"]
    assert {c["monitor_slug"] for c in checkins} == {"sentry-hourly"}
    assert checkins[0]["monitor_config"] == {
        "schedule": {"type": "interval", "value": 2, "unit": "hour"},
        "checkin_margin": 1,
        "max_runtime": 2,  # 90 s, in whole minutes
    }
    # The failure is an event too, once.
    [event] = sent.items("event")
    assert event["tags"]["delayq.task_name"] == name


def test_a_schedule_not_monitored_checks_nothing_in(sentry: Init, declare) -> None:
    sent = sentry(DelayqIntegration(monitors=["sentry.other"]))
    run_tick(declare("sentry.quiet", digest, cron="0 * * * *"))
    schedule(add, args=[1, 2])
    run_all()
    assert sent.items("check_in") == []


def test_monitors_are_off_by_default(sentry: Init, declare) -> None:
    sent = sentry()
    run_tick(declare("sentry.quiet", digest, cron="0 * * * *"))
    assert sent.items("check_in") == []


@pytest.mark.parametrize(
    "when",
    [{"cron": "*/10 * * * * *"}, {"every": datetime.timedelta(seconds=90)}],
    ids=["cron-with-seconds", "every-90-s"],
)
def test_a_schedule_sentry_cannot_express_has_no_config_and_one_warning(
    sentry: Init, declare, caplog: pytest.LogCaptureFixture, when: dict[str, Any]
) -> None:
    sent = sentry(DelayqIntegration(monitors=True))
    name = declare("sentry.often", digest, **when)
    with caplog.at_level(logging.WARNING, logger="django_delayq.contrib.sentry"):
        run_tick(name)
        run_tick(name)
    checkins = sent.items("check_in")
    assert [c["status"] for c in checkins] == ["in_progress", "ok"] * 2
    assert all("monitor_config" not in c for c in checkins)
    [warning] = [r for r in caplog.records if r.name.endswith("monitors")]
    assert "cannot express" in warning.getMessage()
    assert "'sentry-often'" in warning.getMessage()
