"""When a periodic schedule ticks: every= on whole periods, cron= in its
time zone, across both daylight-saving changes; and what a bad definition
is told."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from django_delayq.exceptions import InvalidTaskDefinition
from django_delayq.recurring import PeriodicTask, Schedule, periodic
from django_delayq.recurring.declared import forget, from_setting
from django_delayq.recurring.ticks import parse_tick, tick_text
from django_delayq.registry import build, unregister

UTC = datetime.UTC


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).astimezone(UTC)


def schedule_of(**definition: Any) -> Schedule:
    def noop() -> None: ...

    task = build(noop, name="tests.noop", queue=None, max_attempts=None)
    return Schedule(name="s", task=task, **definition)


def utc(ticks: list[datetime.datetime]) -> list[str]:
    return [t.strftime("%Y-%m-%d %H:%M:%S") for t in ticks]


def test_every_ticks_on_whole_periods_since_the_epoch() -> None:
    s = schedule_of(every=datetime.timedelta(minutes=5))
    ticks = s.ticks_after(
        at("2026-11-26T10:02:00+00:00"), at("2026-11-26T10:20:00+00:00"), 10
    )
    assert utc(ticks) == [
        "2026-11-26 10:05:00",
        "2026-11-26 10:10:00",
        "2026-11-26 10:15:00",
        "2026-11-26 10:20:00",
    ]
    # After means after: a tick at the start is not repeated.
    assert utc(
        s.ticks_after(
            at("2026-11-26T10:05:00+00:00"), at("2026-11-26T10:10:00+00:00"), 10
        )
    ) == ["2026-11-26 10:10:00"]
    assert utc(s.ticks_until(at("2026-11-26T10:12:00+00:00"), 2)) == [
        "2026-11-26 10:05:00",
        "2026-11-26 10:10:00",
    ]
    assert (
        len(
            s.ticks_after(
                at("2026-11-26T00:00:00+00:00"), at("2026-11-27T00:00:00+00:00"), 7
            )
        )
        == 7
    )


def test_cron_ticks_in_its_time_zone() -> None:
    s = schedule_of(cron="0 8 * * *", timezone="Asia/Shanghai")
    ticks = s.ticks_after(
        at("2026-11-26T00:00:00+00:00"), at("2026-11-28T00:00:00+00:00"), 10
    )
    # 08:00 in Shanghai is midnight UTC.
    assert utc(ticks) == ["2026-11-27 00:00:00", "2026-11-28 00:00:00"]
    assert s.definition == "cron 0 8 * * * Asia/Shanghai"
    assert utc(s.ticks_until(at("2026-11-27T00:00:00+00:00"), 2)) == [
        "2026-11-26 00:00:00",
        "2026-11-27 00:00:00",
    ]


def test_six_fields_tick_to_the_second() -> None:
    s = schedule_of(cron="*/20 * * * * *", timezone="UTC")
    ticks = s.ticks_after(
        at("2026-11-26T10:00:00+00:00"), at("2026-11-26T10:01:00+00:00"), 10
    )
    assert utc(ticks) == [
        "2026-11-26 10:00:20",
        "2026-11-26 10:00:40",
        "2026-11-26 10:01:00",
    ]


def test_a_tick_in_the_hour_spring_skips_fires_once_just_after_it() -> None:
    # Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does
    # not exist that day, and the tick runs at 03:00 CEST (01:00 UTC).
    s = schedule_of(cron="30 2 * * *", timezone="Europe/Berlin")
    ticks = s.ticks_after(
        at("2026-03-28T00:00:00+00:00"), at("2026-03-31T00:00:00+00:00"), 10
    )
    assert utc(ticks) == [
        "2026-03-28 01:30:00",
        "2026-03-29 01:00:00",
        "2026-03-30 00:30:00",
    ]


def test_a_tick_in_the_hour_autumn_repeats_fires_once() -> None:
    # Europe/Berlin, 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30
    # happens twice, the tick runs at the first (00:30 UTC).
    s = schedule_of(cron="30 2 * * *", timezone="Europe/Berlin")
    ticks = s.ticks_after(
        at("2026-10-24T00:00:00+00:00"), at("2026-10-27T00:00:00+00:00"), 10
    )
    assert utc(ticks) == [
        "2026-10-24 00:30:00",
        "2026-10-25 00:30:00",
        "2026-10-26 01:30:00",
    ]


def test_an_hourly_cron_follows_elapsed_time_across_the_change() -> None:
    # A wildcard hour is not a wall-clock appointment: as Debian's cron
    # does, it ticks every hour of elapsed time, both 02:00s included.
    s = schedule_of(cron="0 * * * *", timezone="Europe/Berlin")
    ticks = s.ticks_after(
        at("2026-10-24T23:30:00+00:00"), at("2026-10-25T02:30:00+00:00"), 10
    )
    assert utc(ticks) == [
        "2026-10-25 00:00:00",
        "2026-10-25 01:00:00",
        "2026-10-25 02:00:00",
    ]
    assert len(set(ticks)) == 3


def test_a_tick_key_names_the_schedule_and_the_time_in_order() -> None:
    s = schedule_of(every=datetime.timedelta(seconds=1))
    first, second = s.ticks_after(
        at("2026-11-26T10:00:00+00:00"), at("2026-11-26T10:00:02+00:00"), 2
    )
    assert s.key(first) == "periodic:s@2026-11-26T10:00:01.000000Z"
    assert s.key(first) < s.key(second)  # keys sort as their ticks do
    assert parse_tick(tick_text(first)) == first


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs exactly one of cron= (a cron expression"),
        ({"cron": "0 8 * * *", "every": 60}, "needs exactly one of cron="),
        ({"cron": "0 8 * *"}, "cron= must be a cron expression of 5 fields"),
        ({"cron": "0 25 * * *"}, "cron='0 25 * * *' is not a valid cron expression"),
        (
            {"every": datetime.timedelta(milliseconds=500)},
            "every= must be a datetime.timedelta of at least 1 second",
        ),
        ({"every": "5m"}, "every= must be a datetime.timedelta"),
        (
            {"cron": "0 8 * * *", "timezone": "Mars/Olympus"},
            "timezone='Mars/Olympus' is not a time zone",
        ),
        ({"every": 60, "timezone": "UTC"}, "timezone= applies to cron= only"),
        (
            {"every": 60, "catch_up": "some"},
            'catch_up= must be "none", "latest" or "all"',
        ),
    ],
)
def test_a_bad_definition_is_refused_at_decoration(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidTaskDefinition, match="@periodic") as caught:
        periodic(**options)
    assert message in str(caught.value)


def test_a_function_with_other_parameters_is_refused() -> None:
    def needs(order_id: int) -> None: ...

    with pytest.raises(InvalidTaskDefinition, match="cannot be called by its ticks"):
        periodic(every=datetime.timedelta(minutes=1), name="tests.needs")(needs)


def test_a_tick_reaches_a_function_that_asks_for_it() -> None:
    seen: list[Any] = []

    def digest(tick: datetime.datetime) -> None:
        seen.append(tick)

    registered = periodic(cron="0 8 * * *", timezone="UTC", name="tests.digest")(digest)
    try:
        assert isinstance(registered, PeriodicTask)
        assert registered.argument_problem([], {}) is None  # by hand, no tick
        registered.run([], {"tick": "2026-11-26T08:00:00.000000Z"}, None)
        assert seen == [at("2026-11-26T08:00:00+00:00")]
        registered.run([], {}, None)
        assert seen[1].tzinfo is not None
    finally:
        forget(registered.name)
        unregister(registered.name)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("0 8 * * *", "must be a dict such as"),
        ({"cron": "0 8 * * *"}, 'needs "task"'),
        (
            {"task": "no.such.function", "cron": "0 8 * * *"},
            "neither a registered task nor an importable function",
        ),
        ({"task": "json.dumps", "every": 60, "color": "red"}, "unknown keys color"),
        ({"task": "json.dumps", "every": 60}, "cannot be called by its ticks"),
    ],
)
def test_a_bad_setting_entry_names_itself(entry: Any, message: str) -> None:
    with pytest.raises(InvalidTaskDefinition) as caught:
        from_setting("nightly", entry)
    assert str(caught.value).startswith("DELAYQ[\"PERIODIC\"]['nightly']")
    assert message in str(caught.value)
