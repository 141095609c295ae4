"""DELAYQ["MIDDLEWARE"] around every run: order, what a middleware sees,
its writes inside the run's transaction, and a middleware that raises
failing that run only; and the on_schedule() hooks, which give the tasks a
process schedules their metadata. Runs go through the worker's path (the testing
toolkit's run_due() calls it); a real worker process runs them in groups
in tests/acceptance/commands/test_worker_processes.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.db import transaction
from django.test import override_settings

import django_delayq
from django_delayq import Call, schedule, schedule_many
from django_delayq.api import check_call
from django_delayq.conf import get_settings
from django_delayq.conf.middleware import get_middleware, load
from django_delayq.exceptions import InvalidConfiguration, UnsupportedPayloadType
from django_delayq.models import DelayedTask, Status
from django_delayq.testing import run_due, test_mode
from django_delayq.worker.attempts import current_run
from tests.testapp.middleware import Keeps, request_id
from tests.testapp.models import Ledger
from tests.testapp.tasks import add, reads_meta, record

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
        ("tests.testapp.middleware.HookNotCallable", "on_schedule attribute"),
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


# -- on_schedule(): the metadata of the tasks a process schedules ---------------

REQUEST_ID = "tests.testapp.middleware.RequestId"
TAG_A = "tests.testapp.middleware.TagA"
TAG_B = "tests.testapp.middleware.TagB"
PICKY = "tests.testapp.middleware.Picky"
KEEPS = "tests.testapp.middleware.Keeps"


def test_the_run_its_middleware_and_its_function_see_the_metadata() -> None:
    token = request_id.set("req-1")
    try:
        with middleware(OUTER, REQUEST_ID):
            task = schedule(reads_meta, args=["seen"], meta={"tenant": "acme"})
    finally:
        request_id.reset(token)
    expected = {"team": "billing", "tenant": "acme", "request_id": "req-1"}
    assert DelayedTask.objects.get(pk=task.pk).meta == expected
    with middleware(OUTER, REQUEST_ID):
        [ran] = run_due()
    assert ran.outcome == "succeeded"
    # The function's current_run() sees it, and the request id the run's
    # middleware put back from it.
    assert ran.task.result == {"wrapped": {"meta": expected, "request_id": "req-1"}}
    assert current_run() is None
    assert django_delayq.current_run is current_run


def test_a_run_sees_its_metadata_read_only_and_none_as_empty() -> None:
    Keeps.runs.clear()
    with middleware(KEEPS):
        schedule(add, args=[1, 2], meta={"tenant": "acme"})
        schedule(add, args=[3, 4])
        run_due()
    by_args = {tuple(run.args): run for run in Keeps.runs}
    assert dict(by_args[(1, 2)].meta) == {"tenant": "acme"}
    assert dict(by_args[(3, 4)].meta) == {}  # NULL in the row
    with pytest.raises(TypeError):
        by_args[(1, 2)].meta["tenant"] = "other"  # type: ignore[index]


def test_hooks_run_in_the_settings_order_for_every_task_scheduled() -> None:
    with middleware(TAG_A, OUTER, TAG_B):
        one = schedule(add, args=[1, 2], meta={"tags": ["caller"]})
        many = schedule_many([Call(add, args=[i, i]) for i in range(3)])
        kept = check_call(Call(add, args=[1, 2]))
    assert one.meta == {"tags": ["caller", f"a:{add.name}", f"b:{add.name}"]}
    assert DelayedTask.objects.get(pk=one.pk).meta == one.meta
    assert {str(row.meta) for row in many} == {
        str({"tags": [f"a:{add.name}", f"b:{add.name}"]})
    }
    assert kept is None
    # The instances the hooks belong to are the chain's: built once.
    with middleware(TAG_A):
        built = get_middleware()
        [(path, hook)] = built.schedule_hooks
        assert (path, getattr(hook, "__self__", None)) == (TAG_A, built.handler)


def test_without_hooks_the_metadata_is_the_calls() -> None:
    with middleware(OUTER, INNER):
        assert get_middleware().schedule_hooks == ()
        task = schedule(add, args=[1, 2], meta={"tenant": "acme"})
    assert task.meta == {"tenant": "acme"}


def test_a_hook_that_raises_reaches_the_caller_and_nothing_is_written() -> None:
    with middleware(PICKY), transaction.atomic():
        with pytest.raises(PermissionError, match="no tenant in this context"):
            schedule(add, args=[1, 2], meta={"hook": "raise"})
        with pytest.raises(PermissionError):
            schedule_many(
                [Call(add, args=[1, 2]), Call(add, args=[1, 2], meta={"hook": "raise"})]
            )
        # The caller's transaction goes on.
        kept = schedule(add, args=[1, 2])
    assert list(DelayedTask.objects.values_list("pk", flat=True)) == [kept.pk]


@pytest.mark.parametrize(
    ("asked", "error", "message"),
    [
        (
            "none",
            UnsupportedPayloadType,
            rf"^{PICKY}.on_schedule\(\) \(DELAYQ\[\"MIDDLEWARE\"\]\) returned "
            rf"NoneType, not the task's metadata; return a dict",
        ),
        (
            "unstorable",
            UnsupportedPayloadType,
            rf"^{PICKY}.on_schedule\(\) \(DELAYQ\[\"MIDDLEWARE\"\]\) returned "
            rf"metadata that cannot be stored: meta\['seen'\] is a set",
        ),
    ],
)
def test_what_a_hook_returns_is_checked_naming_it(
    asked: str, error: type[Exception], message: str
) -> None:
    with middleware(PICKY), pytest.raises(error, match=message):
        schedule(add, args=[1, 2], meta={"hook": asked})
    assert not DelayedTask.objects.exists()


def test_a_broken_middleware_setting_refuses_to_schedule() -> None:
    """As every run would fail, so does every schedule(), saying why."""
    with (
        middleware("tests.testapp.middleware.Missing"),
        pytest.raises(InvalidConfiguration, match="cannot be imported"),
    ):
        schedule(add, args=[1, 2])
    assert not DelayedTask.objects.exists()
