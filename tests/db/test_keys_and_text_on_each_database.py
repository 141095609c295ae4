"""Dedupe keys and stored text behave alike on every database.

MariaDB compares text case- and accent-insensitively by default, ignores
trailing spaces under ``PAD SPACE`` collations, has no conditional unique
index, and stores 4-byte characters only in ``utf8mb4``: each is checked
here as a user meets it, on whichever database the suite runs.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import close_old_connections, connection, transaction

from django_delayq import cancel, schedule
from django_delayq.exceptions import DuplicateTask, InvalidArgument, InvalidPayload
from django_delayq.models import DelayedTask, Status
from tests.support.helpers import drain
from tests.testapp.tasks import always_fails, order_cancel, send_reminder
from tests.testapp.tasks import record as record_call

pytestmark = pytest.mark.django_db(transaction=True)

#: Pairs of keys that differ, though a case- or accent-insensitive or
#: space-padding collation would call them equal.
DIFFERENT_KEYS = [
    ("Order:1", "order:1"),
    ("cafe", "café"),
    ("k", "k "),
    ("straße", "strasse"),
    ("😀", "😁"),
]


@pytest.mark.parametrize(("first", "second"), DIFFERENT_KEYS)
def test_keys_that_differ_only_as_a_collation_would_ignore_are_two_keys(
    redis_client: Any, first: str, second: str
) -> None:
    one = schedule(order_cancel, delay=60, args=[1], key=first)
    two = schedule(order_cancel, delay=60, args=[2], key=second)
    assert sorted(DelayedTask.objects.values_list("key", flat=True)) == sorted(
        [first, second]
    )
    # Cancelling by one key leaves the other alone.
    assert cancel(key=first) == 1
    assert DelayedTask.objects.get(pk=one.pk).status == Status.CANCELLED
    assert DelayedTask.objects.get(pk=two.pk).status == Status.SCHEDULED


def test_the_same_key_is_held_once_even_in_4_byte_characters_at_full_length(
    redis_client: Any,
) -> None:
    key = "🔑" * 200  # 800 bytes in UTF-8
    first = schedule(order_cancel, delay=60, args=[1], key=key)
    with pytest.raises(DuplicateTask) as caught:
        schedule(order_cancel, delay=60, args=[2], key=key)
    assert caught.value.existing_id == first.pk
    assert DelayedTask.objects.get().key == key
    with pytest.raises(InvalidArgument, match="at most 200"):
        schedule(order_cancel, delay=60, args=[3], key=key + "🔑")
    assert DelayedTask.objects.count() == 1


def test_a_key_with_a_nul_byte_is_refused_and_nothing_is_written(
    redis_client: Any,
) -> None:
    with pytest.raises(InvalidArgument, match="key="):
        schedule(order_cancel, delay=60, args=[1], key="order\x001")
    assert not DelayedTask.objects.exists()


def test_eight_callers_racing_for_one_key_leave_one_task(redis_client: Any) -> None:
    """Each caller on a connection of its own, all released at once."""
    start = threading.Barrier(8)
    won: list[Any] = []
    refused: list[BaseException] = []

    def caller(n: int) -> None:
        try:
            start.wait()
            won.append(schedule(order_cancel, delay=60, args=[n], key="race"))
        except DuplicateTask as exc:
            refused.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(won) == 1, won
    assert len(refused) == 7
    assert list(
        DelayedTask.objects.filter(key="race").values_list("pk", flat=True)
    ) == [won[0].pk]


def test_4_byte_characters_in_arguments_results_and_errors_are_kept(
    redis_client: Any,
) -> None:
    text = "emoji 😀, CJK 𠜎, music 𝄞"
    ran = schedule(record_call, args=[text])
    sent = schedule(send_reminder, args=[1], kwargs={"text": text})
    failed = schedule(always_fails, args=[f"no {text}"], max_attempts=1)
    drain()
    for row in (ran, sent, failed):
        row.refresh_from_db()
    assert (ran.status, ran.args, ran.result) == (Status.SUCCEEDED, [text], text)
    assert (sent.status, sent.kwargs) == (Status.SUCCEEDED, {"text": text})
    assert failed.status == Status.FAILED
    assert text in failed.last_error
    assert text in failed.last_traceback


def test_a_nul_character_in_arguments_is_refused_on_every_database(
    redis_client: Any,
) -> None:
    """PostgreSQL cannot store it, so no database takes it: a task written
    on one database runs on any other."""
    with pytest.raises(InvalidPayload, match="NUL character"):
        schedule(send_reminder, args=[1], kwargs={"text": "a\x00b"})
    assert not DelayedTask.objects.exists()


def test_a_task_table_not_in_utf8mb4_is_refused_as_e020() -> None:
    """As on a MariaDB whose database was created in its own default,
    latin1: the columns are, whatever the connection's character set."""
    from django_delayq.checks.config import check_database_server

    if connection.vendor != "mysql":
        pytest.skip("only MySQL and MariaDB store text in a chosen character set")
    table = DelayedTask._meta.db_table
    assert check_database_server(databases=["default"]) == []
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {table} MODIFY last_error longtext "
            "CHARACTER SET latin1 NOT NULL"
        )
    try:
        [found] = check_database_server(databases=["default"])
        assert found.id == "delayq.E020"
        assert "last_error (latin1)" in found.msg
        assert "CONVERT TO CHARACTER SET utf8mb4" in str(found.hint)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                f"ALTER TABLE {table} MODIFY last_error longtext "
                "CHARACTER SET utf8mb4 NOT NULL"
            )


def test_callers_left_waiting_by_a_rolled_back_holder_get_the_key_or_a_duplicate(
    redis_client: Any,
) -> None:
    """Two callers wait on a key another transaction inserted; it rolls
    back. On MariaDB both then hold a shared lock on the key and each waits
    for the other: one is a deadlock's victim, whose ``schedule()`` (in
    autocommit, owning its transaction) tries again and meets the winner's
    key. Every database: one task, one ``DuplicateTask``, no other error."""
    holding = threading.Event()
    release = threading.Event()
    won: list[Any] = []
    refused: list[BaseException] = []
    other: list[BaseException] = []

    def holder() -> None:
        try:
            with transaction.atomic():
                schedule(order_cancel, delay=60, args=[0], key="contested")
                holding.set()
                assert release.wait(30)
                transaction.set_rollback(True)
        finally:
            connection.close()

    def caller(n: int) -> None:
        try:
            won.append(schedule(order_cancel, delay=60, args=[n], key="contested"))
        except DuplicateTask as exc:
            refused.append(exc)
        except BaseException as exc:  # any other is the failure
            other.append(exc)
        finally:
            connection.close()

    first = threading.Thread(target=holder)
    first.start()
    assert holding.wait(30)
    callers = [threading.Thread(target=caller, args=(n,)) for n in (1, 2)]
    for thread in callers:
        thread.start()
    try:
        waiting_for_the_lock(2)
    finally:
        release.set()
    for thread in [first, *callers]:
        thread.join(60)
    assert other == []
    assert (len(won), len(refused)) == (1, 1)
    assert list(
        DelayedTask.objects.filter(key="contested").values_list("pk", flat=True)
    ) == [won[0].pk]


def waiting_for_the_lock(count: int) -> None:
    """Wait until ``count`` sessions wait for a lock (MariaDB, PostgreSQL),
    or a moment for the callers to block (SQLite, which has no such view)."""
    import time

    deadline = time.monotonic() + 30
    query = {
        "mysql": "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
        "WHERE COMMAND = 'Query' AND INFO LIKE 'INSERT INTO%delayedtask%'",
        "postgresql": "SELECT COUNT(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock'",
    }.get(connection.vendor)
    if query is None:
        time.sleep(0.5)
        return
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(query)
            (waiting,) = cursor.fetchone()
        if waiting >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"{count} sessions never waited for the key's lock")
