from __future__ import annotations

import datetime
import logging
import math

import pytest

from django_delayq.exceptions import (
    DelayQueueException,
    InvalidSchedule,
    RedisPermissionDenied,
    RedisUnavailable,
)
from django_delayq.store.backoff import Backoff, retry_pause
from django_delayq.timing import (
    ceil_ms,
    moment_text,
    resolve_expires_at,
    resolve_run_at,
    to_score,
)

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, 250_400, tzinfo=datetime.UTC)


def test_delay_in_seconds_is_added_to_now_and_rounded_up_to_the_millisecond():
    assert resolve_run_at(1.5, None, now=NOW) == datetime.datetime(
        2026, 1, 1, 12, 0, 1, 751_000, tzinfo=datetime.UTC
    )


def test_timedelta_delay_is_accepted():
    run_at = resolve_run_at(datetime.timedelta(minutes=15), None, now=NOW)
    assert run_at - NOW == datetime.timedelta(minutes=15, microseconds=600)


def test_neither_delay_nor_eta_means_now():
    assert resolve_run_at(None, None, now=NOW) == ceil_ms(NOW)


def test_aware_eta_is_used_as_is():
    eta = datetime.datetime(2027, 5, 1, 18, 0, tzinfo=datetime.UTC)
    assert resolve_run_at(None, eta, now=NOW) == eta


def test_an_eta_keeps_its_microseconds_and_its_score_is_rounded_up():
    for eta in [NOW, NOW - datetime.timedelta(days=3)]:  # a past eta too
        assert resolve_run_at(None, eta, now=NOW) == eta
        # Never dispatched before it: the score is the next whole millisecond.
        assert to_score(eta) == to_score(ceil_ms(eta))
    assert to_score(NOW) == 1767268800251
    before_epoch = datetime.datetime(1969, 12, 31, 23, 59, 59, 999_500)
    assert to_score(before_epoch.replace(tzinfo=datetime.UTC)) == 0


def test_score_is_integer_epoch_milliseconds():
    assert (
        to_score(datetime.datetime(1970, 1, 1, 0, 0, 1, 500_000, tzinfo=datetime.UTC))
        == 1500
    )
    assert to_score(ceil_ms(NOW)) == 1767268800251


@pytest.mark.parametrize(
    ("delay", "message"),
    [
        (-1, "cannot be negative"),
        (math.nan, "finite"),
        (math.inf, "finite"),
        (-math.inf, "finite"),
        (datetime.timedelta(seconds=-5), "cannot be negative"),
        (10**12, "more than 100 years"),
    ],
)
def test_bad_delay_values_are_rejected_with_a_value_error(delay, message):
    with pytest.raises(InvalidSchedule, match=message) as caught:
        resolve_run_at(delay, None, now=NOW)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, DelayQueueException)
    assert "delay=" in str(caught.value)


@pytest.mark.parametrize("delay", ["10", True, [1], NOW])
def test_delay_of_the_wrong_type_names_the_accepted_types(delay):
    with pytest.raises(InvalidSchedule, match="number of seconds"):
        resolve_run_at(delay, None, now=NOW)


def test_both_delay_and_eta_is_an_error():
    with pytest.raises(InvalidSchedule, match="not both"):
        resolve_run_at(5, NOW, now=NOW)


def test_naive_eta_is_rejected_when_use_tz_is_on(settings):
    settings.USE_TZ = True
    with pytest.raises(InvalidSchedule, match="timezone-aware"):
        resolve_run_at(None, datetime.datetime(2027, 1, 1, 9, 0), now=NOW)


@pytest.mark.parametrize(
    "eta", [datetime.date(2027, 1, 1), 1700000000, "2027-01-01T00:00"]
)
def test_eta_must_be_a_datetime(eta):
    with pytest.raises(InvalidSchedule, match="eta= must be a datetime"):
        resolve_run_at(None, eta, now=NOW)


def test_a_relative_expiry_counts_from_now_and_a_datetime_is_kept():
    run_at = resolve_run_at(60, None, now=NOW)
    assert resolve_expires_at(None, run_at, now=NOW) is None
    assert resolve_expires_at(90, run_at, now=NOW) == NOW + datetime.timedelta(
        seconds=90
    )
    span = datetime.timedelta(minutes=5, microseconds=7)
    assert resolve_expires_at(span, run_at, now=NOW) == NOW + span
    moment = datetime.datetime(2026, 1, 1, 13, 0, 0, 1, tzinfo=datetime.UTC)
    assert resolve_expires_at(moment, run_at, now=NOW) == moment


def test_an_expiry_must_fall_after_the_task_is_due():
    run_at = resolve_run_at(60, None, now=NOW)
    # 60 s from now is not after the task is due (60 s from now, rounded up).
    with pytest.raises(InvalidSchedule, match="it could never run"):
        resolve_expires_at(60, run_at, now=NOW)
    # A past eta is due now: an expiry between the two is past already.
    past = NOW - datetime.timedelta(hours=1)
    with pytest.raises(InvalidSchedule, match="not after it is due at 2026-01-01T12"):
        resolve_expires_at(past + datetime.timedelta(minutes=1), past, now=NOW)
    assert resolve_expires_at(1, past, now=NOW) == NOW + datetime.timedelta(seconds=1)


def test_without_use_tz_an_expiry_is_a_naive_local_time(settings):
    settings.USE_TZ = False
    settings.TIME_ZONE = "Europe/Paris"
    now = datetime.datetime(2026, 1, 1, 13, 0)  # naive, local, as Django gives
    aware = datetime.datetime(2026, 1, 1, 12, 30, tzinfo=datetime.UTC)
    expires_at = resolve_expires_at(aware, now, now=now)
    assert expires_at == datetime.datetime(2026, 1, 1, 13, 30)
    assert moment_text(expires_at) == "2026-01-01 13:30:00"


def test_moment_text_is_utc_to_the_millisecond():
    paris = datetime.timezone(datetime.timedelta(hours=1))
    moment = datetime.datetime(2026, 11, 29, 11, 0, tzinfo=paris)
    assert moment_text(moment) == "2026-11-29 10:00:00 UTC"
    assert moment_text(NOW) == "2026-01-01 12:00:00.250 UTC"


def test_retry_pauses_double_up_to_a_cap_even_after_a_long_outage():
    assert [retry_pause(n) for n in (1, 2, 3)] == [0.2, 0.4, 0.8]
    assert retry_pause(5000) == 5.0  # no OverflowError after hours of errors


def test_a_backoff_doubles_its_waits_up_to_its_cap_and_starts_afresh():
    backoff = Backoff(base=0.1, cap=0.5)
    assert [backoff.failed() for _ in range(4)] == [0.2, 0.4, 0.5, 0.5]
    backoff.answered()
    assert backoff.failed() == 0.2
    # A cap for one error (a shard whose node is failing over).
    assert backoff.failed(cap=0.3) == 0.3


def test_a_backoff_with_grace_retries_at_once_first():
    backoff = Backoff(base=0.5, cap=30.0, grace=1)
    assert [backoff.failed() for _ in range(4)] == [0.0, 1.0, 2.0, 4.0]


def test_a_backoff_logs_each_error_and_the_end_of_an_outage(caplog):
    logger = logging.getLogger("django_delayq.tests.backoff")
    backoff = Backoff("dispatcher", logger)
    with caplog.at_level(logging.DEBUG, logger=logger.name):
        backoff.answered()  # nothing had failed: nothing to say
        backoff.failed(RedisUnavailable(ConnectionError("refused")))
        backoff.failed(RedisPermissionDenied("NOPERM no permissions"))
        backoff.failed(ValueError("a bug"))
        backoff.answered()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines[0] == (
        "WARNING",
        "dispatcher: ConnectionError: refused; retrying in 0.2 s",
    )
    # A denial is a configuration error: loud whatever the usual level.
    assert lines[1][0] == "ERROR"
    assert lines[2] == ("ERROR", "dispatcher: unexpected error; carrying on")
    assert caplog.records[2].exc_info is not None
    assert lines[3] == (
        "WARNING",
        "dispatcher: Redis answers again, after 3 failed attempt(s)",
    )
    assert len(lines) == 4
