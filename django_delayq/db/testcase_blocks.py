"""Django's private transaction state that the testing toolkit reads, in one
place.

Inside Django's ``TestCase`` the test's transaction never commits, so the
toolkit's ``"immediate"`` mode needs to know which atomic blocks the test
case opened (``Atomic._from_testcase``, set by ``TestCase``), the savepoint
of the outermost block the test's own code opened
(``connection.atomic_blocks``, ``connection.savepoint_ids``), and the end of
that block (Django has no hook for it: ``connection.savepoint_commit`` is
wrapped, and the waiting ``connection.run_on_commit`` callbacks run there).
None of these names is public API; each is read through :func:`_private`,
which fails with an error naming the attribute and the Django version if a
release renames it, instead of a test mode misbehaving quietly. No other
module of the package touches them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import django


def _private(connection: Any, name: str) -> Any:
    try:
        return getattr(connection, name)
    except AttributeError:
        raise RuntimeError(
            f"django-delayq's testing toolkit reads the database connection's "
            f"{name!r}, which Django {django.get_version()} does not have: "
            f"use a Django version django-delayq supports."
        ) from None


def from_testcase(block: Any) -> bool:
    """Whether an atomic block is one of those Django's ``TestCase`` opens
    around a test (it marks them so, for ``durable=True``)."""
    return bool(getattr(block, "_from_testcase", False))


def inside_testcase(connection: Any) -> bool:
    """Whether the connection's transaction is a ``TestCase``'s own."""
    blocks = _private(connection, "atomic_blocks")
    return bool(blocks) and from_testcase(blocks[0])


def test_code_savepoint(connection: Any) -> str | None:
    """Inside ``TestCase``: the savepoint of the outermost atomic block the
    test's own code opened, or None when it opened none."""
    blocks = _private(connection, "atomic_blocks")
    savepoints = _private(connection, "savepoint_ids")
    # The first block has no savepoint (it began the transaction), so block
    # i has savepoint_ids[i - offset].
    offset = len(blocks) - len(savepoints)
    return next(
        (
            savepoints[index - offset]
            for index, block in enumerate(blocks)
            if not from_testcase(block)
            and index >= offset
            and savepoints[index - offset] is not None
        ),
        None,
    )


def run_at_release(connection: Any, waits_for: Callable[[Any, str], bool]) -> None:
    """Run the ``on_commit`` callbacks that ``waits_for(callback, sid)`` says
    wait for savepoint ``sid`` when it is released (the block that made it
    ended without error; a rollback drops them as Django drops callbacks).

    Wraps the connection's ``savepoint_commit`` once.
    """
    if getattr(connection, "_delayq_runs_at_release", False):
        return
    release = _private(connection, "savepoint_commit")
    _private(connection, "run_on_commit")

    @functools.wraps(release)
    def savepoint_commit(sid: str) -> None:
        release(sid)
        waiting = [
            func for _, func, _ in connection.run_on_commit if waits_for(func, sid)
        ]
        if not waiting:
            return
        connection.run_on_commit = [
            item for item in connection.run_on_commit if item[1] not in waiting
        ]
        for run in waiting:
            run()

    connection.savepoint_commit = savepoint_commit
    connection._delayq_runs_at_release = True
