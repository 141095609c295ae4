"""How the admin writes a time relative to now: a time to come rounded up
(never shown sooner than it is), a time gone by rounded down."""

from __future__ import annotations

import datetime
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_delayq.admin.display import ahead, duration, until

NOW = datetime.datetime(2030, 1, 2, 9, 0, tzinfo=datetime.UTC)
UNITS = {"s": 1, "min": 60, "h": 3600, "days": 86400}


def at(**delta: float) -> str:
    return until(NOW + datetime.timedelta(**delta), NOW)


@pytest.mark.parametrize(
    ("delta", "shown"),
    [
        ({"seconds": 1.4}, "in 2 s"),
        ({"seconds": 1}, "in 1 s"),
        ({"seconds": 59.2}, "in 1 min"),
        ({"seconds": 60}, "in 1 min"),
        ({"seconds": 60.000001}, "in 2 min"),
        ({"minutes": 14, "seconds": 30}, "in 15 min"),
        ({"minutes": 59, "seconds": 59.9}, "in 1 h"),
        ({"hours": 1, "seconds": 0.5}, "in 1 h 1 min"),
        ({"hours": 48}, "in 2 days"),
        ({"seconds": 0.99}, "due now"),
        ({"seconds": -0.99}, "due now"),
        ({"seconds": -1.4}, "overdue 1 s"),
        ({"minutes": -2, "seconds": -10}, "overdue 2 min"),
        ({"hours": -49}, "overdue 2 days"),
    ],
)
def test_until_rounds_what_is_to_come_up_and_what_is_past_down(delta, shown):
    assert at(**delta) == shown


def test_durations_of_what_happened_still_round_down():
    assert duration(1.9) == "1 s"
    assert duration(0.3509) == "350 ms"
    assert duration(14 * 60 + 59) == "14 min"
    assert duration(1.4, up=True) == "2 s"
    assert duration(0.3501, up=True) == "351 ms"
    assert ahead(0.3) == "in 300 ms"


def shown_seconds(text: str) -> tuple[int, int]:
    """``'in 1 h 5 min'`` -> (3900, 60): the seconds it says, and the size of
    its smallest unit."""
    parts = re.findall(r"(\d+) (s|min|h|days)", text)
    assert parts, text
    total = sum(int(n) * UNITS[unit] for n, unit in parts)
    return total, UNITS[parts[-1][1]]


@given(micros=st.integers(1_000_000, 47 * 3600 * 1_000_000))
def test_a_time_to_come_is_never_shown_sooner_and_at_most_a_unit_later(micros):
    left = datetime.timedelta(microseconds=micros)
    said, unit = shown_seconds(until(NOW + left, NOW))
    assert said >= left.total_seconds()
    assert said - left.total_seconds() < unit


@given(micros=st.integers(1_000_000, 47 * 3600 * 1_000_000))
def test_a_time_gone_by_is_never_shown_longer_ago_and_at_most_a_unit_less(micros):
    gone = datetime.timedelta(microseconds=micros)
    said, unit = shown_seconds(until(NOW - gone, NOW))
    assert said <= gone.total_seconds()
    assert gone.total_seconds() - said < unit
