"""A tick's key, ``periodic:<name>@<UTC time>``: written by ``tick_key`` and
read by ``parse_tick_key``, which the planner, the worker, the admin and the
overview all use; the query forms agree with them on a real database."""

from __future__ import annotations

import datetime
import zoneinfo

import pytest
from django.db.models import Value

from django_delayq.models import DelayedTask
from django_delayq.recurring.overview import BEHIND_AFTER, late_ticks
from django_delayq.recurring.ticks import (
    parse_tick,
    parse_tick_key,
    schedule_of_key,
    schedule_of_key_sql,
    tick_key,
    tick_key_sql,
    tick_prefix,
    tick_prefix_sql,
    tick_text,
)

TICK = datetime.datetime(2026, 3, 29, 1, 30, 0, 250, tzinfo=datetime.UTC)


def test_a_key_reads_back_as_its_schedule_and_time():
    key = tick_key("nightly-report", TICK)
    assert key == "periodic:nightly-report@2026-03-29T01:30:00.000250Z"
    assert key.startswith(tick_prefix("nightly-report"))
    assert parse_tick_key(key) == ("nightly-report", TICK)
    assert schedule_of_key(key) == "nightly-report"
    assert parse_tick(tick_text(TICK)) == TICK


@pytest.mark.parametrize(
    "name", ["a", "nightly report", "día:7", "periodic:nested", "x" * 160]
)
@pytest.mark.parametrize(
    "due",
    [
        TICK,
        datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC),
        datetime.datetime(2099, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.UTC),
    ],
)
def test_every_key_written_reads_back_as_written(name, due):
    key = tick_key(name, due)
    assert parse_tick_key(key) == (name, due)
    assert tick_key(*parse_tick_key(key)) == key


def test_a_key_is_written_in_utc_whatever_the_ticks_zone():
    paris = TICK.astimezone(zoneinfo.ZoneInfo("Europe/Paris"))
    assert tick_key("x", paris) == tick_key("x", TICK)
    _, due = parse_tick_key(tick_key("x", paris))
    assert due == paris
    assert due.tzinfo is datetime.UTC


@pytest.mark.parametrize(
    "key",
    [
        None,
        42,
        b"periodic:nightly@2026-03-29T01:30:00.000250Z",
        "",
        "order-cancel:7",  # a key of the user's own
        "periodic:",
        "periodic:@2026-03-29T01:30:00.000250Z",  # no name
        "periodic:nightly",  # no time
        "periodic:nightly@",  # an empty time
        "periodic:nightly@yesterday",  # a time that does not parse
        "periodic:nightly@2026-03-29T01:30:00Z",  # not to the microsecond
        "periodic:nightly@2026-03-29T01:30:00.25Z",  # the same, cut short
        "periodic:nightly@2026-3-29T1:30:00.000250Z",  # another way to write it
        "periodic:nightly@2026-03-29T01:30:00.000250",  # no zone
        "periodic:nightly@2026-03-29T01:30:00.000250Z ",  # trailing text
        "periodic:a@b@2026-03-29T01:30:00.000250Z",  # '@' in the name
        "PERIODIC:nightly@2026-03-29T01:30:00.000250Z",  # another prefix
    ],
)
def test_what_is_no_ticks_key_names_no_schedule(key):
    assert parse_tick_key(key) is None
    assert schedule_of_key(key) is None


@pytest.mark.django_db
def test_the_query_forms_write_and_read_keys_as_the_functions_do():
    row = DelayedTask.objects.create(
        name="t", key=tick_key("nightly", TICK), run_at=TICK
    )
    found = (
        DelayedTask.objects.filter(pk=row.pk)
        .annotate(
            prefix=tick_prefix_sql(Value("nightly")),
            key_then=tick_key_sql(Value("nightly"), TICK),
            schedule=schedule_of_key_sql("key"),
        )
        .values("prefix", "key_then", "schedule")
        .get()
    )
    assert found == {
        "prefix": tick_prefix("nightly"),
        "key_then": row.key,
        "schedule": "nightly",
    }


@pytest.mark.django_db
def test_the_overview_counts_late_ticks_alike_bounded_or_not():
    late = TICK - BEHIND_AFTER - datetime.timedelta(seconds=1)
    for key in [
        tick_key("nightly", late),
        tick_key("nightly", late - datetime.timedelta(minutes=1)),
        tick_key("hourly", late),
        "periodic:hourly@written by hand",
    ]:
        DelayedTask.objects.create(name="t", key=key, run_at=late)
    expected = {"nightly": 2, "hourly": 2}
    for limit in (None, 10):
        counts = late_ticks(TICK, "default", limit)
        assert {name: count for name, (count, _) in counts.items()} == expected
