"""Errors after which the database has rolled back the whole transaction,
and retrying a write that owns its transaction after one.

MySQL and MariaDB (InnoDB) roll a deadlock's victim back whole, where
PostgreSQL and SQLite fail only the statement. Concurrent ``schedule()``
calls with one dedupe key meet there: under the duplicate-key check InnoDB
takes shared locks, and when the key's first writer rolls back, the next
two each wait for the other to upgrade theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import DatabaseError, connections

T = TypeVar("T")

#: MySQL's and MariaDB's error codes for "this transaction was rolled back
#: whole": a deadlock victim (1213). A lock wait timeout (1205) rolls back
#: the statement only, unless innodb_rollback_on_timeout is on (then 1205
#: comes with the same loss: it is counted too, to be safe).
TRANSACTION_ROLLED_BACK = frozenset({1213, 1205})

#: A deadlock's victim: retried (the other side has gone on by then). A lock
#: wait timeout is not: it waited long already, and would wait as long again.
DEADLOCK = 1213
#: Tries of a write that owns its transaction, deadlocks included.
TRIES = 3


def rolls_back_the_transaction(exc: BaseException, connection: Any) -> bool:
    """Whether ``exc`` means the database rolled back the whole transaction,
    not only the failed statement (PostgreSQL and SQLite never do)."""
    return (
        connection.vendor == "mysql"
        and isinstance(exc, DatabaseError)
        and bool(exc.args)
        and exc.args[0] in TRANSACTION_ROLLED_BACK
    )


def retrying_deadlocks(db: str, write: Callable[[], T]) -> T:
    """Run ``write`` (a block that opens its own ``atomic()``), again after a
    deadlock, if it owns its transaction: the caller had none open, so the
    rolled-back transaction held nothing but ``write``'s own statements.

    Inside a caller's transaction the error goes up at once: the database
    dropped the caller's earlier writes too, which only the caller can redo.
    """
    connection = connections[db]
    tries = 1 if connection.in_atomic_block else TRIES
    for attempt in range(1, tries + 1):
        try:
            return write()
        except DatabaseError as exc:
            deadlock = rolls_back_the_transaction(exc, connection) and (
                exc.args[0] == DEADLOCK
            )
            if attempt == tries or not deadlock:
                raise
    raise AssertionError("unreachable")  # pragma: no cover
