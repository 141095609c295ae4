"""Calling an ``async def`` task function from a worker's thread.

A worker thread calls a task's function synchronously, inside the task's
transaction (``atomic=True``) or its savepoint in a group. A coroutine
function is run to its end by asgiref's ``async_to_sync``: the coroutine runs
on an event loop in a thread of its own while the worker thread waits and
*serves its thread-sensitive calls*. So ``sync_to_async(...,
thread_sensitive=True)`` and Django's async ORM methods (``acreate()``,
``aupdate()``, ...), which use it, run on the worker thread, on its database
connection, inside the task's transaction: what the coroutine writes commits
or rolls back with the attempt, as a sync task's writes do.

This module imports no models: :mod:`django_delayq.registry` uses it, and a
tasks module imports that while the apps are still loading.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from asgiref.sync import async_to_sync, iscoroutinefunction

from .exceptions import TimeLimitExceeded


def run(
    func: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    limit: float | None,
) -> Any:
    """Call ``func`` with ``args`` and ``kwargs`` and return its value; a
    coroutine function is awaited to its end, for at most ``limit`` seconds."""
    if not iscoroutinefunction(func):
        return func(*args, **kwargs)
    return async_to_sync(_within)(func, args, kwargs, limit)


async def _within(
    func: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    limit: float | None,
) -> Any:
    """Await ``func(*args, **kwargs)``; past ``limit`` seconds, cancel it and
    raise :class:`TimeLimitExceeded`.

    The watchdog's interruption cannot stop a coroutine: it is raised in the
    worker thread, which waits on a lock for the coroutine and would see it
    only when the coroutine calls back or ends. Cancelling the coroutine on
    its own loop stops it at its next ``await``, as the watchdog stops a
    function at its next instruction.
    """
    if limit is None:
        return await func(*args, **kwargs)
    deadline = asyncio.timeout(limit)
    try:
        async with deadline:
            return await func(*args, **kwargs)
    except TimeoutError:
        if deadline.expired():
            raise TimeLimitExceeded from None
        raise  # the task's own timeout, not its time limit
