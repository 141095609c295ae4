"""The options of a task are defined once, in TaskOptions: @task, @periodic,
a DELAYQ["PERIODIC"] entry and the Django Tasks backend take them from it."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from django_delayq import task
from django_delayq.exceptions import InvalidTaskDefinition
from django_delayq.options import TASK_OPTIONS, TaskOptions, task_option_problem
from django_delayq.recurring import periodic
from django_delayq.recurring.declared import SETTING_TASK_OPTIONS
from django_delayq.registry import build


def spelled_out(function: object) -> dict[str, object]:
    signature = inspect.signature(function)  # type: ignore[arg-type]
    return {
        name: parameter.default
        for name, parameter in signature.parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }


DEFAULTS = {field.name: field.default for field in dataclasses.fields(TaskOptions)}


def test_every_task_option_has_a_check():
    assert set(TASK_OPTIONS) == set(DEFAULTS)


def test_task_spells_out_the_task_options_with_their_defaults():
    assert spelled_out(task) == DEFAULTS


def test_periodic_takes_the_task_options_with_their_defaults():
    options = {
        name: default
        for name, default in spelled_out(periodic).items()
        if name in DEFAULTS
    }
    assert options == DEFAULTS


def test_a_periodic_setting_entry_takes_task_options_only_of_those():
    assert set(SETTING_TASK_OPTIONS) < set(DEFAULTS)


def test_the_tasks_backend_options_are_task_options_with_their_defaults():
    from django_delayq.contrib.tasks import compat

    if not compat.AVAILABLE:
        pytest.skip("no Tasks framework (django.tasks or its backport)")
    from django_delayq.contrib.tasks.backend import OPTIONS as backend_options

    assert backend_options == {name: DEFAULTS[name] for name in backend_options}


def noop() -> None:
    pass


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("name", "", r"@task\(name=\.\.\.\) must be a non-empty string"),
        ("name", "x" * 201, r"at most 200 characters"),
        ("queue", "", r"@task\(queue=\.\.\.\) must be a queue name; got ''"),
        ("max_attempts", 0, r"@task\(max_attempts=\.\.\.\) must be an integer"),
        ("priority", 101, r"@task\(priority=\.\.\.\) must be an integer from -100"),
        ("atomic", 1, r"@task\(atomic=\.\.\.\) must be True or False; got 1"),
        ("time_limit", 0, r"@task\(time_limit=\.\.\.\) must be a number of seconds"),
        ("time_limit", True, r"or None; got True"),
        ("meta", ["team"], r"@task\(meta=\.\.\.\): meta= must be a dict"),
        ("meta", {"at": {1}}, r"@task\(meta=\.\.\.\): meta\['at'\] is a set"),
        ("meta", {"x": "y" * 5000}, r"over the metadata limit of 4096"),
    ],
)
def test_a_bad_option_is_refused_naming_it(option, value, message):
    with pytest.raises(InvalidTaskDefinition, match=message):
        TaskOptions(**{"name": "tests.noop", option: value}).checked()
    with pytest.raises(InvalidTaskDefinition, match=message):
        build(noop, **{"name": "tests.noop", option: value})


def test_the_first_bad_option_is_the_one_named():
    with pytest.raises(InvalidTaskDefinition, match="queue"):
        TaskOptions(queue="", priority=500, name="x").checked()


def test_the_same_check_names_another_place():
    where = 'TASKS["default"]["OPTIONS"]["atomic"]'
    assert task_option_problem("atomic", "yes", where=where) == (
        f"{where} must be True or False; got 'yes'."
    )
    assert task_option_problem("max_attempts", None, where=where) is None


def test_a_tasks_metadata_is_kept_as_stored():
    built = build(noop, name="tests.noop", meta={"z": 1, "team": ("a", "b")})
    # JSON as a row holds it: a tuple is a list.
    assert built.meta == {"z": 1, "team": ["a", "b"]}
    assert build(noop, name="tests.noop", meta={}).meta is None
    assert build(noop, name="tests.noop").meta is None


def test_checked_options_are_built_into_the_task():
    options = TaskOptions(name="tests.noop", queue="orders", time_limit=5).checked()
    assert options.time_limit == 5.0
    assert isinstance(options.time_limit, float)
    built = build(noop, **dataclasses.asdict(options))
    assert built.options == options
    assert build(noop).options == TaskOptions(name=f"{__name__}.noop")
