"""The async twins of the API: ``aschedule()``, ``aschedule_many()``,
``acancel()``, ``areschedule()`` and ``aretry()``.

Each takes the same arguments as its sync twin, raises the same errors and
returns the same value. As Django's own ``a``-methods do (``QuerySet.aget()``,
``Task.aenqueue()``), each runs its twin through ``sync_to_async(...,
thread_sensitive=True)``: on the thread that holds the caller's database
connection (in a request, the thread all of that request's sync code runs
on). So the write joins the transaction open on that connection, if there is
one, and the task is indexed in Redis when it commits; with none, the write
commits at once and the task is indexed before the call returns, as
``schedule()`` does in autocommit.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from asgiref.sync import sync_to_async

from . import api
from .models import DelayedTask

__all__ = ["acancel", "areschedule", "aretry", "aschedule", "aschedule_many"]


async def aschedule(
    fn_or_name: Any,
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    delay: float | datetime.timedelta | None = None,
    eta: datetime.datetime | None = None,
    queue: str | None = None,
    key: str | None = None,
    replace: bool = False,
    max_attempts: int | None = None,
    priority: int | None = None,
    using: str | None = None,
) -> DelayedTask:
    """:func:`~django_delayq.schedule`, from async code; the same arguments,
    errors and transaction semantics."""
    return await sync_to_async(api.schedule, thread_sensitive=True)(
        fn_or_name,
        args=args,
        kwargs=kwargs,
        delay=delay,
        eta=eta,
        queue=queue,
        key=key,
        replace=replace,
        max_attempts=max_attempts,
        priority=priority,
        using=using,
    )


async def aschedule_many(
    calls: Iterable[api.Call], *, using: str | None = None
) -> list[DelayedTask]:
    """:func:`~django_delayq.schedule_many`, from async code.

    ``calls`` is read on the connection's thread, with the rest: pass a list
    (or any iterable that thread may consume), not an async iterator.
    """
    return await sync_to_async(api.schedule_many, thread_sensitive=True)(
        calls, using=using
    )


async def acancel(
    task_or_id: DelayedTask | uuid.UUID | str | None = None,
    *,
    key: str | None = None,
    using: str | None = None,
) -> bool:
    """:func:`~django_delayq.cancel`, from async code."""
    return await sync_to_async(api.cancel, thread_sensitive=True)(
        task_or_id, key=key, using=using
    )


async def areschedule(
    task_or_id: DelayedTask | uuid.UUID | str | None = None,
    *,
    key: str | None = None,
    delay: float | datetime.timedelta | None = None,
    eta: datetime.datetime | None = None,
    using: str | None = None,
) -> DelayedTask:
    """:func:`~django_delayq.reschedule`, from async code."""
    return await sync_to_async(api.reschedule, thread_sensitive=True)(
        task_or_id, key=key, delay=delay, eta=eta, using=using
    )


async def aretry(
    task_or_id: DelayedTask | uuid.UUID | str,
    *,
    delay: float | datetime.timedelta | None = None,
    eta: datetime.datetime | None = None,
    using: str | None = None,
) -> DelayedTask:
    """:func:`~django_delayq.retry`, from async code."""
    return await sync_to_async(api.retry, thread_sensitive=True)(
        task_or_id, delay=delay, eta=eta, using=using
    )
