"""A test mode is a backend named by dotted path, as Django names an email or
Tasks backend: "manual" and "immediate" stand for the toolkit's own, and a
project may name its own indexer class."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from django_delayq import cancel, schedule
from django_delayq.conf.schema import TEST_MODES
from django_delayq.models import DelayedTask, OutboxEntry, Status
from django_delayq.outbox import indexer
from django_delayq.testing import run_due, test_mode
from django_delayq.testing.modes import ImmediateIndexer, ManualIndexer
from django_delayq.testing.running import TOOLKIT_CLAIM
from tests.testapp.models import Order
from tests.testapp.tasks import add, create_order

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(30)]

#: What RecordingIndexer saw, as (action, task ids, database) per call.
SEEN: list[tuple[str, list[object], str]] = []


class RecordingIndexer:
    """An indexer of a project's own: it records what would reach Redis."""

    def index(self, tasks: Sequence[DelayedTask], action: str, using: str) -> None:
        SEEN.append((f"index {action}", [task.pk for task in tasks], using))

    def unindex(self, tasks: Sequence[DelayedTask], action: str, using: str) -> None:
        SEEN.append((f"unindex {action}", [task.pk for task in tasks], using))


def test_the_named_modes_are_the_toolkits_indexer_classes():
    with test_mode("manual"):
        assert isinstance(indexer(), ManualIndexer)
    with test_mode("immediate"):
        assert isinstance(indexer(), ImmediateIndexer)
    assert TEST_MODES == {
        "manual": "django_delayq.testing.modes.ManualIndexer",
        "immediate": "django_delayq.testing.modes.ImmediateIndexer",
    }


def test_a_dotted_path_names_a_projects_own_indexer():
    SEEN.clear()
    with test_mode(f"{__name__}.RecordingIndexer"):
        with transaction.atomic():
            task = schedule(add, args=[1, 2], delay=60)
        cancel(task)
    assert [
        ("index schedule", [task.pk], "default"),
        ("unindex cancel", [task.pk], "default"),
    ] == SEEN
    assert OutboxEntry.objects.count() == 0  # Redis was not tried


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("tests.testing.no_such_module.Indexer", "cannot import"),
        (f"{__name__}.SEEN", "has no index() and unindex() methods"),
    ],
)
def test_a_dotted_path_that_names_no_indexer_is_a_clear_error(mode, why):
    with test_mode(mode), pytest.raises(ImproperlyConfigured) as raised:
        schedule(add, args=[1, 2], delay=60)
    assert str(raised.value).startswith(f'DELAYQ["TEST_MODE"] = {mode!r}: ')
    assert why in str(raised.value)
    # Nothing half-written: the row went with the error.
    assert DelayedTask.objects.count() == 0


def test_test_mode_refuses_what_is_neither_a_mode_nor_a_dotted_path():
    with pytest.raises(ValueError, match="dotted path of an indexer class"):
        test_mode("eager")


@test_mode("manual")
def test_run_due_claims_through_the_workers_entry_without_a_delivery():
    task = schedule(create_order, args=["toolkit"])
    (ran,) = run_due()
    assert ran.outcome == "succeeded"
    row = DelayedTask.objects.get(pk=task.pk)
    assert (row.status, row.attempts) == (Status.SUCCEEDED, 1)
    # No stream delivered it: the claim says the toolkit ran it.
    assert row.claim_entry == TOOLKIT_CLAIM
    assert Order.objects.filter(status="toolkit").exists()
