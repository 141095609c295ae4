"""Every change of a periodic schedule's row (django_delayq.transitions):
each moves its row from the state it is fenced on to the next, and does
nothing at all when the row is no longer what the caller read."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

import pytest

from django_delayq import transitions
from django_delayq.models import PeriodicSchedule

pytestmark = pytest.mark.django_db

DB = "default"
NOW = datetime.datetime(2026, 11, 26, 10, 0, 0, tzinfo=datetime.UTC)
READ = NOW - datetime.timedelta(minutes=1)  # planned through, as read
HORIZON = NOW + datetime.timedelta(seconds=5)
OTHER = NOW + datetime.timedelta(seconds=3)  # another planner's horizon

ACTIVE: dict[str, Any] = {}
PAUSED = {"paused": True, "paused_at": READ}
REMOVED = {"removed_at": READ}
#: What a row holds, for comparing before and after.
FIELDS = ("definition", "planned_through", "paused", "paused_at", "removed_at")


def make(name: str = "s", **state: Any) -> PeriodicSchedule:
    values = {"definition": "every 1 s", "planned_through": READ, **state}
    return PeriodicSchedule.objects.create(name=name, **values)


def stored(name: str = "s") -> dict[str, Any]:
    return PeriodicSchedule.objects.filter(name=name).values(*FIELDS).get()


@dataclasses.dataclass(frozen=True)
class Change:
    state: dict[str, Any]
    call: Callable[[PeriodicSchedule], Any]
    result: Any
    written: dict[str, Any]


CHANGES = {
    "advance: active -> planned further": Change(
        ACTIVE,
        lambda row: transitions.advance_schedule(row, HORIZON, DB),
        True,
        {"planned_through": HORIZON},
    ),
    "advance many: active -> planned further": Change(
        ACTIVE,
        lambda row: transitions.advance_schedules([row], HORIZON, DB),
        {"s"},
        {"planned_through": HORIZON},
    ),
    "redefine: active -> active, new definition, from now": Change(
        ACTIVE,
        lambda row: transitions.redefine_schedule(row, "every 2 s", NOW, DB),
        True,
        {"definition": "every 2 s", "planned_through": NOW},
    ),
    "redefine: removed -> active again": Change(
        REMOVED,
        lambda row: transitions.redefine_schedule(row, "every 2 s", NOW, DB),
        True,
        {"definition": "every 2 s", "planned_through": NOW, "removed_at": None},
    ),
    "retire: active -> removed": Change(
        ACTIVE,
        lambda row: transitions.retire_schedule(row.name, NOW, DB),
        True,
        {"removed_at": NOW},
    ),
    "retire: paused -> removed": Change(
        PAUSED,
        lambda row: transitions.retire_schedule(row.name, NOW, DB),
        True,
        {"removed_at": NOW},
    ),
    "pause: active -> paused": Change(
        ACTIVE,
        lambda row: transitions.pause_schedule(row.name, NOW, DB),
        True,
        {"paused": True, "paused_at": NOW},
    ),
    "resume: paused -> active, from now": Change(
        PAUSED,
        lambda row: transitions.resume_schedule(row.name, NOW, DB),
        True,
        {"paused": False, "paused_at": None, "planned_through": NOW},
    ),
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_each_change_moves_its_row_from_the_state_it_is_fenced_on(change):
    row = make(**change.state)
    before = stored()
    assert change.call(row) == change.result
    assert stored() == {**before, **change.written}
    # What the caller holds is left as read: it updates it after commit.
    assert {field: getattr(row, field) for field in FIELDS} == before


@dataclasses.dataclass(frozen=True)
class Stale:
    state: dict[str, Any]
    #: What another process wrote after the caller read the row.
    meanwhile: dict[str, Any]
    call: Callable[[PeriodicSchedule], Any]
    result: Any


STALE = {
    "advance after another planner advanced it": Stale(
        ACTIVE,
        {"planned_through": OTHER},
        lambda row: transitions.advance_schedule(row, HORIZON, DB),
        False,
    ),
    "advance after a pause": Stale(
        ACTIVE,
        PAUSED,
        lambda row: transitions.advance_schedule(row, HORIZON, DB),
        False,
    ),
    "advance after a removal": Stale(
        ACTIVE,
        REMOVED,
        lambda row: transitions.advance_schedule(row, HORIZON, DB),
        False,
    ),
    "advance after a deploy redefined it": Stale(
        ACTIVE,
        {"definition": "every 2 s"},
        lambda row: transitions.advance_schedule(row, HORIZON, DB),
        False,
    ),
    "advance many after another planner advanced them": Stale(
        ACTIVE,
        {"planned_through": OTHER},
        lambda row: transitions.advance_schedules([row], HORIZON, DB),
        set(),
    ),
    "advance many after a pause": Stale(
        ACTIVE,
        PAUSED,
        lambda row: transitions.advance_schedules([row], HORIZON, DB),
        set(),
    ),
    "redefine after another process redefined it": Stale(
        ACTIVE,
        {"definition": "every 2 s", "planned_through": OTHER},
        lambda row: transitions.redefine_schedule(row, "every 2 s", NOW, DB),
        False,
    ),
    "redefine after another planner advanced it": Stale(
        ACTIVE,
        {"planned_through": OTHER},
        lambda row: transitions.redefine_schedule(row, "every 2 s", NOW, DB),
        False,
    ),
    "redefine after a removal": Stale(
        ACTIVE,
        REMOVED,
        lambda row: transitions.redefine_schedule(row, "every 2 s", NOW, DB),
        False,
    ),
    "retire after another process retired it": Stale(
        ACTIVE,
        REMOVED,
        lambda row: transitions.retire_schedule(row.name, NOW, DB),
        False,
    ),
    "pause after another pause": Stale(
        ACTIVE,
        PAUSED,
        lambda row: transitions.pause_schedule(row.name, NOW, DB),
        False,
    ),
    "resume after another resume": Stale(
        PAUSED,
        {"paused": False, "paused_at": None, "planned_through": OTHER},
        lambda row: transitions.resume_schedule(row.name, NOW, DB),
        False,
    ),
}


@pytest.mark.parametrize("stale", STALE.values(), ids=STALE.keys())
def test_a_stale_fence_changes_nothing(stale):
    row = make(**stale.state)
    PeriodicSchedule.objects.filter(name=row.name).update(**stale.meanwhile)
    before = stored()
    assert stale.call(row) == stale.result
    assert stored() == before


def test_advancing_many_moves_each_group_and_reports_only_its_own():
    """Rows planned together share their planned_through: one UPDATE each
    group; a row another planner moved meanwhile is not reported moved."""
    later = READ + datetime.timedelta(seconds=2)
    rows = [make("a"), make("b"), make("c", planned_through=later), make("d")]
    PeriodicSchedule.objects.filter(name="d").update(planned_through=OTHER)
    assert transitions.advance_schedules(rows, HORIZON, DB) == {"a", "b", "c"}
    assert dict(PeriodicSchedule.objects.values_list("name", "planned_through")) == {
        "a": HORIZON,
        "b": HORIZON,
        "c": HORIZON,
        "d": OTHER,
    }


def test_a_schedule_created_twice_keeps_the_first_row():
    first = transitions.create_schedules(
        [PeriodicSchedule(name="s", definition="every 1 s", planned_through=READ)],
        DB,
    )
    again = transitions.create_schedules(
        [
            PeriodicSchedule(name="s", definition="every 9 s", planned_through=NOW),
            PeriodicSchedule(name="t", definition="every 1 s", planned_through=NOW),
        ],
        DB,
    )
    assert [row.name for row in first] == ["s"]
    assert sorted((row.name, row.definition) for row in again) == [
        ("s", "every 1 s"),
        ("t", "every 1 s"),
    ]
    assert stored("s")["planned_through"] == READ
    assert transitions.create_schedules([], DB) == []


@pytest.mark.parametrize(
    "call",
    [
        transitions.retire_schedule,
        transitions.pause_schedule,
        transitions.resume_schedule,
    ],
)
def test_a_change_of_a_schedule_without_a_row_writes_nothing(call):
    assert call("missing", NOW, DB) is False
    assert not PeriodicSchedule.objects.exists()
