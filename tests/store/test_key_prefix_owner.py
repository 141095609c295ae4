"""Two projects on one Redis with one KEY_PREFIX: the second one is refused.

The other project is played by a fingerprint written under the prefix, as
its first loop would have written it, and by due entries whose ids no row
of this project has.
"""

from __future__ import annotations

import logging
import uuid

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.db import transaction

from django_delayq import schedule
from django_delayq.conf import get_settings
from django_delayq.exceptions import InvalidConfiguration, KeyPrefixInUse
from django_delayq.models import OutboxEntry, Status
from django_delayq.outbox import replay_outbox
from django_delayq.ownership import fingerprint, forget_checks
from django_delayq.store.keys import encode_member, shard_keys
from django_delayq.worker.execution import execute
from tests.support.helpers import drain, due_members, refresh
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "delayq:owner"
KEYS = shard_keys("delayq", "default", 0)
THEIRS = "0123456789abcdef"


def test_the_first_loop_claims_the_prefix_and_later_ones_recognise_it(
    redis_client,
):
    task = schedule(add, args=[1, 2])
    drain()
    assert refresh(task).status == Status.SUCCEEDED
    ours = fingerprint()
    assert ours is not None
    assert len(ours) == 16
    assert redis_client.get(OWNER) == ours.encode()
    # Redis restarted empty: claimed again by the next loop.
    redis_client.flushall()
    call_command("delayq_sweep", once=True, verbosity=0)
    assert redis_client.get(OWNER) == ours.encode()


@pytest.fixture
def claimed_by_another_project(redis_client):
    redis_client.set(OWNER, THEIRS)
    # This process may have checked the prefix a moment ago, when it was
    # still ours: the claim changed behind its back.
    forget_checks()
    # One of their tasks, due now: no row here has its id.
    theirs = uuid.uuid4()
    redis_client.zadd(KEYS.due, {encode_member(theirs): 1})
    return theirs


@pytest.mark.parametrize(
    "command", ["delayq_dispatch", "delayq_worker", "delayq_sweep"]
)
def test_every_loop_refuses_a_prefix_another_project_holds(
    redis_client, claimed_by_another_project, command, caplog
):
    ours = schedule(add, args=[1, 2])
    with pytest.raises(CommandError) as refused:
        call_command(command, once=True, verbosity=0)
    message = str(refused.value)
    assert message.startswith("DELAYQ[\"KEY_PREFIX\"] 'delayq' on this Redis")
    assert f"belongs to another project (fingerprint {THEIRS}" in message
    assert message.endswith("(delayq.E014)")
    assert "(delayq.E014)" in caplog.text  # the log says it too
    # Nothing of theirs was touched, nothing of ours was moved, run, or
    # written among theirs: the outbox keeps it.
    assert set(due_members(redis_client)) == {claimed_by_another_project}
    assert not redis_client.exists(KEYS.ready, KEYS.dead)
    assert refresh(ours).status == Status.SCHEDULED
    assert OutboxEntry.objects.filter(task_id=ours.pk).exists()
    assert redis_client.get(OWNER) == THEIRS.encode()


def test_schedule_writes_nothing_into_the_due_sets_of_another_project(
    redis_client, claimed_by_another_project, caplog
):
    with caplog.at_level(logging.ERROR, logger="django_delayq"):
        with transaction.atomic():
            ours = schedule(add, args=[1, 2])
            later = schedule(add, args=[3, 4], delay=60)
        schedule(add, args=[5, 6])
    # Committed, but only theirs is in their due-sets.
    assert set(due_members(redis_client)) == {claimed_by_another_project}
    kept = OutboxEntry.objects.filter(task_id__in=[ours.pk, later.pk])
    assert kept.count() == 2
    assert all("(delayq.E014)" in entry.last_error for entry in kept)
    [line, *_] = [r.getMessage() for r in caplog.records if "E014" in r.getMessage()]
    assert "kept in the outbox until the prefix is this project's" in line
    assert f"delete the key {OWNER!r}" in line  # the fix
    # The other project is gone for good: its claim is deleted, and the
    # sweeper replays the outbox under this project's claim; nothing is lost.
    redis_client.delete(OWNER)
    redis_client.zrem(KEYS.due, encode_member(claimed_by_another_project))
    call_command("delayq_sweep", once=True, verbosity=0)
    assert not OutboxEntry.objects.exists()
    assert redis_client.get(OWNER) == fingerprint().encode()
    drain()
    assert refresh(ours).status == Status.SUCCEEDED


def test_a_replay_by_hand_writes_nothing_into_the_due_sets_of_another_project(
    redis_client, claimed_by_another_project
):
    """The admin's "Replay now" replays the outbox outside the sweeper,
    whose own check would have stopped first."""
    with transaction.atomic():
        ours = schedule(add, args=[1, 2])
    result = replay_outbox()
    assert (result.replayed, result.failed) == (0, 1)
    assert set(due_members(redis_client)) == {claimed_by_another_project}
    [kept] = OutboxEntry.objects.filter(task_id=ours.pk)
    assert "(delayq.E014)" in kept.last_error
    assert kept.attempts == 1  # postponed with backoff, not lost


def test_schedule_checks_the_prefix_once_and_then_only_once_a_minute(
    redis_client,
):
    forget_checks()
    redis_client.config_resetstat()
    for i in range(5):
        schedule(add, args=[i, i])
    stats = redis_client.info("commandstats")
    # One claim (SET NX and GET, one round trip) for five writes.
    assert stats["cmdstat_set"]["calls"] == 1
    assert stats["cmdstat_get"]["calls"] == 1
    assert redis_client.get(OWNER) == fingerprint().encode()
    assert len(due_members(redis_client)) == 5


@pytest.mark.parametrize("key", ["KEY_PREFIX", "TEST_KEY_PREFIX"])
def test_a_prefix_with_a_colon_is_refused_as_e007(settings, key):
    # "shop:eu" would nest in "shop": the ACL key pattern ~shop:* of one
    # project's Redis user would match the other's keys.
    settings.DELAYQ = {**settings.DELAYQ, key: "shop:eu"}
    [error] = [m for m in checks.run_checks() if m.id == "delayq.E007"]
    assert error.msg.startswith(f'DELAYQ["{key}"] must not contain ":"')
    assert "~shop:*" in error.msg
    assert f'e.g. "{key}": "shop-eu"' in error.hint
    with pytest.raises(InvalidConfiguration, match=r"must not contain.*E007"):
        get_settings()


def test_a_worker_stops_rather_than_dead_letter_their_tasks(
    redis_client, claimed_by_another_project
):
    # The prefix was claimed by the other project after this worker started
    # (Redis restarted empty, their loop came first): the first unknown id
    # it meets is checked before it is dead-lettered.
    with pytest.raises(KeyPrefixInUse, match=r"\(delayq\.E014\)"):
        execute(
            claimed_by_another_project,
            worker="test-worker",
            stream=KEYS.ready,
            entry_id="1-0",
        )
    assert not redis_client.exists(KEYS.dead)


def test_check_with_the_database_reports_it_as_e014(
    redis_client, claimed_by_another_project
):
    # What `manage.py check --database default` (and `migrate`) runs.
    found = checks.run_checks(databases=["default"])
    [error] = [message for message in found if message.id == "delayq.E014"]
    assert "belongs to another project" in error.msg
    assert "KEY_PREFIX of this project's own" in error.hint
    # Like Django's own database checks, not by a plain `manage.py check`.
    plain = checks.run_checks()
    assert "delayq.E014" not in {message.id for message in plain}


def test_a_prefix_of_its_own_works_beside_theirs(
    redis_client, claimed_by_another_project, settings
):
    # (This suite pins its test run's prefix: see tests/settings.py.)
    settings.DELAYQ = {
        **settings.DELAYQ,
        "KEY_PREFIX": "shop",
        "TEST_KEY_PREFIX": "shop",
    }
    task = schedule(add, args=[2, 3])
    drain()
    assert refresh(task).status == Status.SUCCEEDED
    assert redis_client.get("shop:owner") == fingerprint().encode()
    assert redis_client.zcard(KEYS.due) == 1  # theirs, untouched
