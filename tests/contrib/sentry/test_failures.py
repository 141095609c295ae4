"""Failed runs as Sentry events, with the real SDK and a recording
transport: one event (or one per attempt) with its tags and context, once
even with the logging integration on, none when Sentry is not initialised."""

from __future__ import annotations

import datetime
import logging
import re
from typing import Any

import pytest
import sentry_sdk
from django.utils import timezone
from sentry_sdk.integrations.logging import LoggingIntegration

from django_delayq import schedule, task
from django_delayq.contrib.sentry import DelayqIntegration
from django_delayq.models import Status
from django_delayq.testing import run_due
from tests.support.sentry import Init

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

LATER = datetime.timedelta(hours=2)


class Declined(Exception):
    pass


@task(name="sentry.charge", max_attempts=3)
def charge(order_id: int, card: str) -> None:
    raise Declined(f"card declined for order {order_id}")


@task(name="sentry.ship")
def ship(order_id: int) -> int:
    return order_id


def run_all() -> None:
    run_due(until=timezone.now() + LATER)


def test_a_task_that_fails_for_good_is_one_event_with_its_tags(sentry: Init) -> None:
    # Without the frames' local variables (the SDK's option), which would
    # show the function's arguments.
    sent = sentry(DelayqIntegration(), include_local_variables=False)
    row = schedule(charge, args=[42, "4242-secret"])
    run_all()
    row.refresh_from_db()
    assert (row.status, row.attempts) == (Status.FAILED, 3)
    [event] = sent.items("event")
    [exception] = event["exception"]["values"]
    assert exception["type"] == "Declined"
    assert exception["value"] == "card declined for order 42"
    assert exception["mechanism"] == {"type": "django_delayq", "handled": False}
    # The traceback of the attempt, down to the task's own frame.
    assert exception["stacktrace"]["frames"][-1]["function"] == "charge"
    assert event["transaction"] == "sentry.charge"
    assert {k: v for k, v in event["tags"].items() if k.startswith("delayq.")} == {
        "delayq.task_name": "sentry.charge",
        "delayq.task_id": str(row.pk),
        "delayq.queue": "default",
        "delayq.attempt": "3/3",
        "delayq.final": "yes",
    }
    context = event["contexts"]["delayq"]
    assert context["id"] == str(row.pk)
    assert (context["attempt"], context["max_attempts"]) == (3, 3)
    assert context["error"] == "Declined: card declined for order 42"
    # Arguments are left out unless asked for.
    assert "args" not in context
    assert "kwargs" not in context
    assert "4242-secret" not in repr(event)


def test_each_attempt_reports_every_failed_attempt(sentry: Init) -> None:
    sent = sentry(DelayqIntegration(failures="each_attempt"))
    schedule(charge, args=[42, "x"])
    run_all()
    events = sent.items("event")
    assert [e["tags"]["delayq.attempt"] for e in events] == ["1/3", "2/3", "3/3"]
    assert [e["tags"]["delayq.final"] for e in events] == ["no", "no", "yes"]


def test_never_reports_nothing_and_lets_the_logged_line_through(
    sentry: Init,
) -> None:
    sent = sentry(DelayqIntegration(failures="never"))
    schedule(charge, args=[42, "x"], max_attempts=1)
    run_all()
    [event] = sent.items("event")
    assert event["logger"] == "django_delayq.execution"
    assert "delayq.task_name" not in event.get("tags", {})


def test_arguments_are_sent_when_asked(sentry: Init) -> None:
    sent = sentry(DelayqIntegration(send_arguments=True))
    schedule(charge, args=[42, "4242"], max_attempts=1)
    run_all()
    [event] = sent.items("event")
    assert event["contexts"]["delayq"]["args"] == [42, "4242"]
    assert event["contexts"]["delayq"]["kwargs"] == {}


def test_a_failure_is_one_event_with_the_logging_integration_on(
    sentry: Init, caplog: pytest.LogCaptureFixture
) -> None:
    # The worker's "task failed" line is logged at ERROR, which Sentry's
    # logging integration (on by default) sends as an event of its own.
    sent = sentry(LoggingIntegration(event_level=logging.WARNING))
    with caplog.at_level(logging.WARNING, logger="django_delayq.execution"):
        schedule(charge, args=[42, "x"], max_attempts=2)
        other = logging.getLogger("shop")
        other.error("an error of the project's own")
        run_all()
    logged = [
        r.getMessage().split()[1]
        for r in caplog.records
        if r.name.endswith("execution")
    ]
    assert logged == ["retrying", "failed"]
    events = sent.items("event")
    # The failure once (from the integration, with its defaults), the
    # retry's warning line (this policy reports no retry), the project's
    # own error: nothing dropped but the duplicate.
    by_source = sorted(
        "delayq" if "delayq.task_name" in e.get("tags", {}) else e["logger"]
        for e in events
    )
    assert by_source == ["delayq", "django_delayq.execution", "shop"]
    [retry] = [e for e in events if e.get("logger") == "django_delayq.execution"]
    assert retry["level"] == "warning"


def test_each_attempt_drops_the_logged_retry_too(sentry: Init) -> None:
    sent = sentry(
        DelayqIntegration(failures="each_attempt"),
        LoggingIntegration(event_level=logging.WARNING),
    )
    schedule(charge, args=[42, "x"], max_attempts=2)
    run_all()
    events = sent.items("event")
    assert [e["tags"]["delayq.attempt"] for e in events] == ["1/2", "2/2"]


def test_nothing_is_sent_when_sentry_is_not_initialised(
    sentry: Init, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured: list[object] = []
    monkeypatch.setattr(sentry_sdk, "capture_event", captured.append)
    schedule(charge, args=[42, "x"], max_attempts=1)
    run_all()
    assert captured == []
    assert not sentry_sdk.get_client().is_active()


def test_a_disabled_integration_sends_nothing(sentry: Init) -> None:
    sent = sentry(disabled_integrations=[DelayqIntegration])
    schedule(charge, args=[42, "x"], max_attempts=1)
    run_all()
    # Only the logged line, which is then left alone.
    [event] = sent.items("event")
    assert event["logger"] == "django_delayq.execution"


def test_a_failure_with_no_exception_is_a_message(sentry: Init) -> None:
    from django_delayq import outcomes

    sent = sentry(DelayqIntegration())
    row = schedule(ship, args=[1])
    # A worker lost: the task is taken over on its last attempt.
    row.status, row.attempts = Status.RUNNING, row.max_attempts
    row.started_at = timezone.now()
    row.save()
    outcomes.fail(row, row.attempts, outcomes.worker_lost(row), "", expect="running")
    [event] = sent.items("event")
    assert (
        event["message"]
        == f"worker lost during attempt {row.attempts} of {row.max_attempts}"
    )
    assert event["level"] == "error"
    assert event["fingerprint"] == [
        "django_delayq",
        "sentry.ship",
        "worker lost during attempt N of N",
    ]
    assert event["tags"]["delayq.final"] == "yes"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"failures": "always"}, "failures=...) must be"),
        ({"send_arguments": "yes"}, "send_arguments=...) must be"),
        ({"monitors": "nightly"}, "monitors=...) must be"),
        ({"monitors": [3]}, "monitors=...) must be"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        DelayqIntegration(**options)
