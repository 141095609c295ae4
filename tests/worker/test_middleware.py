"""DELAYQ["MIDDLEWARE"] around every run: order, what a middleware sees,
its writes inside the run's transaction, and a middleware that raises
failing that run only. Runs go through the worker's path (the testing
toolkit's run_due() calls it); a real worker process runs them in groups
in tests/acceptance/commands/test_worker_processes.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.test import override_settings

from django_delayq import schedule
from django_delayq.conf import get_settings
from django_delayq.conf.middleware import load
from django_delayq.exceptions import InvalidConfiguration
from django_delayq.models import DelayedTask, Status
from django_delayq.testing import run_due, test_mode
from tests.testapp.models import Ledger
from tests.testapp.tasks import add, record

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

OUTER = "tests.testapp.middleware.Outer"
INNER = "tests.testapp.middleware.Inner"
REFUSES = "tests.testapp.middleware.Refuses"


def middleware(*paths: str) -> Any:
    return override_settings(DELAYQ={**settings.DELAYQ, "MIDDLEWARE": list(paths)})


@pytest.fixture(autouse=True)
def _manual() -> Any:
    with test_mode("manual"):
        yield


def keys() -> list[str]:
    return list(Ledger.objects.order_by("id").values_list("key", flat=True))


def test_the_first_entry_is_the_outermost_and_sees_the_run() -> None:
    with middleware(OUTER, INNER):
        task = schedule(add, args=[2, 3])
        [ran] = run_due()
    assert ran.outcome == "succeeded"
    assert keys() == [f"outer:{add.name}:1/3:default", "inner:[2, 3]"]
    # What the chain returns is the task's result.
    assert DelayedTask.objects.get(pk=task.pk).result == {"wrapped": 5}


def test_a_middleware_that_raises_fails_that_run_like_the_task_would() -> None:
    with middleware(OUTER, REFUSES):
        refused = schedule(record, args=["refused"])
        fine = schedule(record, args=["fine"])
        ran = run_due()
    by_id = {r.task.pk: r for r in ran}
    assert by_id[refused.pk].outcome == "retrying"
    assert "PermissionError: the tenant is suspended" in by_id[refused.pk].error
    assert by_id[fine.pk].outcome == "succeeded"
    # The failed run's writes, the middleware's included, were rolled back.
    assert f"outer:{record.name}:1/3:orders" in keys()
    assert keys().count(f"outer:{record.name}:1/3:orders") == 1
    assert list(
        Ledger.objects.filter(key__in=["refused", "fine"]).values_list("key", flat=True)
    ) == ["fine"]
    row = DelayedTask.objects.get(pk=refused.pk)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)


def test_without_middleware_the_function_runs_alone() -> None:
    assert get_settings().middleware == ()
    schedule(add, args=[1, 1])
    [ran] = run_due()
    assert ran.task.result == 2
    assert keys() == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("tests.testapp.middleware.Outer", "must be a list of dotted paths"),
        (["Outer"], "must be a list of dotted paths"),
    ],
)
def test_a_setting_of_the_wrong_shape_is_refused(value: Any, message: str) -> None:
    with override_settings(DELAYQ={**settings.DELAYQ, "MIDDLEWARE": value}):
        errors = [m for m in run_checks() if m.id == "delayq.E021"]
        assert len(errors) == 1
        assert message in errors[0].msg
        with pytest.raises(InvalidConfiguration, match=message):
            get_settings()


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("tests.testapp.middleware.Missing", "cannot be imported"),
        ("tests.testapp.middleware.TakesNothing", "could not be built"),
    ],
)
def test_an_entry_that_cannot_be_built_is_a_check_error(
    path: str, message: str
) -> None:
    with middleware(path):
        [error] = [m for m in run_checks() if m.id == "delayq.E021"]
        assert message in error.msg
        assert path in error.msg
        with pytest.raises(InvalidConfiguration, match=message):
            load((path,))
