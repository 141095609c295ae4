"""Finding the task a call names, and the database to change it in.

:func:`~django_delayq.cancel`, :func:`~django_delayq.reschedule`,
:func:`~django_delayq.retry` and ``schedule(replace=True)`` name a task by
the row, its id or its dedupe key; these helpers validate that before any
database work and read the row back after a fenced UPDATE.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
from django.db.models import QuerySet

from .exceptions import InvalidArgument
from .models import ACTIVE_STATUSES, DelayedTask, write_db
from .text import check_text


@dataclass(frozen=True)
class Lookup:
    task_id: uuid.UUID | None = None
    key: str | None = None

    def __str__(self) -> str:
        return f"key={self.key!r}" if self.key is not None else f"id {self.task_id}"


def parse_lookup(task_or_id: object, key: str | None) -> Lookup:
    """Validate "a task, an id or a key" before any database work."""
    if (task_or_id is None) == (key is None):
        raise InvalidArgument("Pass a task (or its id) or key=, exactly one of them.")
    if key is not None:
        if not isinstance(key, str):
            raise InvalidArgument(f"key= must be a string; got {key!r}.")
        return Lookup(key=check_text(key, "key=", InvalidArgument))
    if isinstance(task_or_id, DelayedTask):
        return Lookup(task_id=task_or_id.pk)
    if isinstance(task_or_id, uuid.UUID):
        return Lookup(task_id=task_or_id)
    if isinstance(task_or_id, str):
        try:
            return Lookup(task_id=uuid.UUID(task_or_id))
        except ValueError:
            raise InvalidArgument(
                f"{task_or_id!r} is not a task id (a UUID)."
            ) from None
    raise TypeError(
        f"Expected a DelayedTask, a UUID or a UUID string, not "
        f"{type(task_or_id).__name__}."
    )


def matching(lookup: Lookup, db: str) -> QuerySet[DelayedTask]:
    rows = DelayedTask.objects.using(db)
    if lookup.key is not None:
        return rows.filter(key=lookup.key)
    assert lookup.task_id is not None
    return rows.filter(pk=lookup.task_id)


def written(lookup: Lookup, db: str, **values: Any) -> DelayedTask:
    """Read back the row an UPDATE in this transaction just wrote ``values`` to."""
    row = matching(lookup, db).filter(**values).order_by("-created_at").first()
    assert row is not None, "the row updated in this transaction is gone"
    return row


def current(lookup: Lookup, db: str) -> DelayedTask | None:
    """The row a lookup names: the active one for a key, any for an id."""
    rows = matching(lookup, db)
    if lookup.key is not None:
        rows = rows.filter(status__in=ACTIVE_STATUSES)
    return rows.first()


def write_alias(using: str | None) -> str:
    """Return the database alias to write to, refusing manual transactions.

    Redis is written from ``on_commit``, which needs either autocommit or an
    ``atomic()`` block; checking first means nothing is written in vain.
    """
    db = write_db()
    if using is not None and using != db:
        # Workers and sweepers read rows from the router's write database;
        # a row written elsewhere would never run.
        raise InvalidArgument(
            f"using={using!r}: task rows live in the database the router picks "
            f"for writing DelayedTask ({db!r}), where the workers read them. "
            f"Route DelayedTask to {using!r} in your database router, or omit "
            f"using=."
        )
    connection = transaction.get_connection(db)
    if not connection.in_atomic_block and not connection.get_autocommit():
        raise transaction.TransactionManagementError(
            "django-delayq needs autocommit or transaction.atomic(): with "
            "set_autocommit(False) it cannot know when your transaction "
            "commits. Wrap the call in transaction.atomic() instead."
        )
    if not connection.in_atomic_block:
        _refuse_transactions_elsewhere(db)
    return db


def _refuse_transactions_elsewhere(db: str) -> None:
    """Refuse a call made inside a transaction of another database than the
    task rows' ``db``: the row would commit at once, on its own, and the
    task run even if the caller's transaction rolled back (or be cancelled
    although it did not commit)."""
    elsewhere = sorted(
        connection.alias
        for connection in connections.all(initialized_only=True)
        if connection.alias != db and connection.in_atomic_block
    )
    if elsewhere:
        raise InvalidArgument(
            f"Called inside a transaction of database {elsewhere[0]!r}, but "
            f"task rows live in {db!r} (the router's database for writing "
            f"DelayedTask): the row would commit at once, on its own, whether "
            f"or not your transaction does. Route django-delayq's models to "
            f"{elsewhere[0]!r}, so that the row is written in your "
            f"transaction, or make the call once it commits: "
            f"transaction.on_commit(lambda: schedule(...), using="
            f"{elsewhere[0]!r})."
        )
