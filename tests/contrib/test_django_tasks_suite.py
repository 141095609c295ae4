"""tools/django_tasks_suite.py: its list of Django's tests left out is the
one the Django Tasks guide shows, and its glue swaps only Django's own
backends."""

from __future__ import annotations

from pathlib import Path

from tools import django_tasks_suite as suite

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "django-tasks.md"


def test_every_left_out_test_is_listed_in_the_guide():
    section = GUIDE.read_text().partition("## Django's own test suite")[2]
    section = section.partition("\n## ")[0]
    for left_out in suite.EXCLUDED:
        # A module, Class.test, or a test listed after its class in a cell.
        parts = left_out.split(".")
        listed = f"`{'.'.join(parts[-2:])}`" in section or (
            len(parts) > 1 and f"`{parts[-1]}`" in section
        )
        assert listed, f"{left_out} is not in the guide's table"


def test_only_django_backends_are_swapped_and_the_immediate_one_tries_once():
    tasks = {
        "default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"},
        "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
        "mine": {"BACKEND": "myproject.backends.Custom", "OPTIONS": {}},
    }
    suite.swap_backends(setting="TASKS", value=tasks)
    assert tasks == {
        "default": {"BACKEND": "tools.django_tasks_glue.StoringDelayQueueBackend"},
        "immediate": {
            "BACKEND": "tools.django_tasks_glue.RunningDelayQueueBackend",
            "OPTIONS": {"max_attempts": 1},
        },
        "mine": {"BACKEND": "myproject.backends.Custom", "OPTIONS": {}},
    }


def test_a_left_out_prefix_covers_its_tests_and_no_others():
    assert suite._excluded("tasks.test_custom_backend.CustomTaskTestCase.test_x") == (
        "test_custom_backend"
    )
    assert suite._excluded("tasks.test_tasks.TaskTestCase.test_get_result") is None
    assert (
        suite._excluded("tasks.test_tasks.TaskTestCase.test_using_priority_x") is None
    )
