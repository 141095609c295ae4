"""What ``schedule()`` returns is what every database gives back.

PostgreSQL's jsonb does not keep JSON as written: ``1e16`` comes back an
int, ``-0.0`` as ``0.0``, and object keys in its own order. The payload is
normalised that way before ``schedule()`` returns, on every database, so a
task's arguments read the same everywhere and never change between the
call and the run.
"""

from __future__ import annotations

import json

import pytest
from django.db import transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from django_delayq import schedule
from django_delayq.models import DelayedTask
from tests.rows.test_payload import json_values, storable_text
from tests.testapp.tasks import takes_anything

pytestmark = pytest.mark.django_db(transaction=True)


@settings(max_examples=200)
@given(
    args=st.lists(json_values, max_size=4),
    kwargs=st.dictionaries(storable_text, json_values, max_size=4),
)
def test_the_arguments_read_back_as_schedule_returned_them(redis_client, args, kwargs):
    with transaction.atomic():
        task = schedule(takes_anything, args=args, kwargs=kwargs, delay=60)
        stored = DelayedTask.objects.get(pk=task.pk)
        # Compared as JSON text, so that key order, int/float and -0.0 count.
        assert encode(stored.args) == encode(task.args)
        assert encode(stored.kwargs) == encode(task.kwargs)
        transaction.set_rollback(True)


@pytest.mark.parametrize(
    ("given_args", "normalised"),
    [
        # The decimal written, not the float's binary value (1.5e300 is not
        # exactly 15 * 10**299 as a float).
        ([1e16, 1.5e300, 2.5e-7, 100.0], [10**16, 15 * 10**299, 2.5e-7, 100.0]),
        ([-0.0, [-0.0]], [0.0, [0.0]]),
        ([{"bb": 1, "a": 2, "é": 3, "ab": 4}], [{"a": 2, "ab": 4, "bb": 1, "é": 3}]),
    ],
)
def test_the_normalisation_is_the_documented_one(redis_client, given_args, normalised):
    task = schedule(takes_anything, args=given_args, delay=60)
    assert encode(task.args) == encode(normalised)
    assert encode(DelayedTask.objects.get(pk=task.pk).args) == encode(normalised)


def encode(value: object) -> str:
    return json.dumps(value)
