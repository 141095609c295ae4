"""Savepoints for the tasks of a group, made only when a task runs SQL.

A group (:mod:`django_delayq.worker.group_commit`) runs each task inside a
savepoint of its own so that a task that raises takes only its own writes
with it; most short tasks write one row or none, and the SAVEPOINT and
RELEASE round trips were half of a worker's time for them.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from django.db import DatabaseError
from django.db.transaction import TransactionManagementError

from .deadlocks import rolls_back_the_transaction


class TransactionLost(DatabaseError):
    """The database rolled back the group's whole transaction while a task
    ran (MySQL and MariaDB roll a deadlock victim back entirely, savepoints
    and all): none of the group's writes stand, whatever its tasks return."""


class TaskSavepoints:
    """A savepoint for each task of a group, made only if the task runs SQL.

    Per task it behaves like a nested ``atomic()``: when the task raises, its
    writes are rolled back to its savepoint and the ``on_commit`` callbacks
    it registered go with them. Unlike ``atomic()`` it costs nothing for a
    task that runs no SQL on the group's database (the savepoint is created
    just before the task's first statement, by an execute wrapper), and a
    task that ends well keeps its savepoint rather than releasing it: the
    group's commit releases them all. The SAVEPOINT and RELEASE round trips
    were half of a worker's time for short tasks.
    """

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.sid: str | None = None  # the running task's savepoint name
        self.made = False
        #: The error with which the database rolled back the whole
        #: transaction, if it did (seen even when the task swallowed it).
        self.lost: DatabaseError | None = None

    def __call__(
        self,
        execute: Callable[..., Any],
        sql: Any,
        params: Any,
        many: bool,
        context: dict[str, Any],
    ) -> Any:
        """Django's execute wrapper: make the savepoint before the first SQL."""
        try:
            return self._execute(execute, sql, params, many, context)
        except DatabaseError as exc:
            if rolls_back_the_transaction(exc, self.connection):
                self.lost = exc
            raise

    def _execute(
        self,
        execute: Callable[..., Any],
        sql: Any,
        params: Any,
        many: bool,
        context: dict[str, Any],
    ) -> Any:
        if self.sid is None or self.made:
            return execute(sql, params, many, context)
        self.made = True  # first: the SAVEPOINT below comes through here
        create = self.connection.ops.savepoint_create_sql(self.sid)
        raw: Any = getattr(context.get("cursor"), "cursor", None)
        if not many and isinstance(sql, str) and _sends_statements_as_text(raw):
            # One round trip for both: the savepoint was a third of the
            # time a worker spent on a task that writes a row. The cursor
            # then moves on to the task's statement's result.
            result = execute(f"{create}; {sql}", params, many, context)
            raw.nextset()
            return result
        with self.connection.cursor() as cursor:
            cursor.execute(create)
        return execute(sql, params, many, context)

    @contextlib.contextmanager
    def around_task(self) -> Iterator[None]:
        connection = self.connection
        connection.savepoint_state += 1
        sid = self.sid = f"dq_{connection.savepoint_state}"
        self.made = False
        # What atomic() does: callbacks registered from now on belong to
        # ``sid``, and are dropped if it is rolled back.
        connection.savepoint_ids.append(sid)
        try:
            yield
            self._check_not_lost()
            if connection.needs_rollback:
                # The task caught a database error without an atomic() of
                # its own: its writes cannot stand, so neither can its success.
                raise TransactionManagementError(
                    "the task's transaction was marked for rollback: it caught a "
                    "database error; wrap the statement that may fail in "
                    "transaction.atomic()"
                )
        except TransactionLost:
            raise
        except BaseException:
            # Nothing to roll back to if the database dropped the whole
            # transaction: the group must start again.
            self._check_not_lost()
            self._roll_back(sid)
            raise
        else:
            # Its callbacks run after the group's commit, among its
            # neighbours': made robust, one that raises is logged (by Django)
            # and the others still run, as with transactions of their own.
            connection.run_on_commit = [
                (sids, func, robust or sid in sids)
                for (sids, func, robust) in connection.run_on_commit
            ]
        finally:
            self.sid = None
            connection.savepoint_ids.pop()

    def _check_not_lost(self) -> None:
        if self.lost is not None:
            raise TransactionLost(
                f"the database rolled back the group's transaction: {self.lost}"
            ) from self.lost

    def _roll_back(self, sid: str) -> None:
        connection = self.connection
        # As atomic() does: the rollback to the savepoint is what the flag
        # asked for (and with the flag set, no statement may run).
        connection.needs_rollback = False
        self.sid = None  # no savepoint for the statement below
        if self.made:
            with connection.cursor() as cursor:
                cursor.execute(connection.ops.savepoint_rollback_sql(sid))
        # What BaseDatabaseWrapper.savepoint_rollback() does with callbacks.
        connection.run_on_commit = [
            (sids, func, robust)
            for (sids, func, robust) in connection.run_on_commit
            if sid not in sids
        ]


def _sends_statements_as_text(cursor: Any) -> bool:
    """Whether ``cursor`` is psycopg 3's client-side cursor (Django's default
    on PostgreSQL): it sends a statement with its parameters bound as text,
    over the simple query protocol, which takes several statements at once.
    Server-side binding, psycopg 2 and SQLite take the savepoint apart."""
    cls = _client_cursor()
    return cls is not None and isinstance(cursor, cls)


@functools.cache
def _client_cursor() -> type | None:
    try:
        from psycopg import ClientCursor
    except ImportError:
        return None
    return ClientCursor
