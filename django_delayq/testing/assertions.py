"""Looking at what is scheduled, and asserting on it."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from django.db.models import QuerySet

from .. import registry
from ..models import DelayedTask, Status, write_db

#: A due time to match: one moment, or a window ``(earliest, latest)``
#: (either end may be None: open).
Eta = datetime.datetime | tuple[datetime.datetime | None, datetime.datetime | None]

_UNSET: Any = object()


def scheduled(
    task: Any = None,
    *,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    key: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    eta: Eta | None = None,
    meta: dict[str, Any] | None = None,
) -> list[DelayedTask]:
    """The scheduled tasks (status ``scheduled``, not yet run), in due order,
    that match every filter given.

    :param task: a ``@task`` function or its registered name.
    :param args: the positional arguments, exactly (as stored: JSON, so a
        tuple matches a list).
    :param kwargs: the keyword arguments, exactly.
    :param key: the dedupe key.
    :param queue: the queue name.
    :param priority: the priority.
    :param eta: the due time: an aware ``datetime`` (to the millisecond, as
        ``run_at`` is stored), or a window ``(earliest, latest)``, ends
        included, either end None for open.
    :param meta: items of the task's metadata: a task matches if its
        metadata has each of them (and maybe more, such as what a
        middleware's ``on_schedule()`` added).
    """
    rows = _filtered(
        DelayedTask.objects.using(write_db()).filter(status=Status.SCHEDULED),
        task=task,
        key=key,
        queue=queue,
        priority=priority,
        eta=eta,
    )
    found = list(rows.order_by("run_at", "id"))
    if args is not None:
        wanted = list(args)
        found = [row for row in found if list(row.args) == wanted]
    if kwargs is not None:
        found = [row for row in found if dict(row.kwargs) == dict(kwargs)]
    if meta is not None:
        items = dict(meta).items()
        found = [
            row
            for row in found
            if all((row.meta or {}).get(k, _UNSET) == v for k, v in items)
        ]
    return found


def assert_scheduled(
    task: Any = None,
    *,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    key: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    eta: Eta | None = None,
    meta: dict[str, Any] | None = None,
    count: int | None = None,
) -> list[DelayedTask]:
    """Fail unless a scheduled task matches the filters (of
    :func:`scheduled`); with ``count``, unless exactly that many do.

    The failure message lists what *is* scheduled. Returns the matches.
    """
    found = scheduled(
        task,
        args=args,
        kwargs=kwargs,
        key=key,
        queue=queue,
        priority=priority,
        eta=eta,
        meta=meta,
    )
    if (count is None and not found) or (count is not None and len(found) != count):
        wanted = _describe_filters(task, args, kwargs, key, queue, priority, eta, meta)
        expected = "a scheduled task" if count is None else f"{count} scheduled task(s)"
        raise AssertionError(
            f"Expected {expected} with {wanted}; found {len(found)}.\n"
            f"{_everything_scheduled()}"
        )
    return found


def assert_not_scheduled(
    task: Any = None,
    *,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    key: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    eta: Eta | None = None,
    meta: dict[str, Any] | None = None,
) -> None:
    """Fail if a scheduled task matches the filters (of :func:`scheduled`);
    the failure message lists what is scheduled."""
    found = scheduled(
        task,
        args=args,
        kwargs=kwargs,
        key=key,
        queue=queue,
        priority=priority,
        eta=eta,
        meta=meta,
    )
    if found:
        wanted = _describe_filters(task, args, kwargs, key, queue, priority, eta, meta)
        raise AssertionError(
            f"Expected no scheduled task with {wanted}; found {len(found)}.\n"
            f"{_everything_scheduled()}"
        )


def _filtered(
    rows: QuerySet[DelayedTask],
    *,
    task: Any,
    key: str | None,
    queue: str | None,
    priority: int | None,
    eta: Eta | None,
) -> QuerySet[DelayedTask]:
    if task is not None:
        rows = rows.filter(name=_name_of(task))
    if key is not None:
        rows = rows.filter(key=key)
    if queue is not None:
        rows = rows.filter(queue=queue)
    if priority is not None:
        rows = rows.filter(priority=priority)
    if isinstance(eta, datetime.datetime):
        # run_at is stored to the millisecond, rounded up: match that.
        rows = rows.filter(
            run_at__gte=eta - datetime.timedelta(milliseconds=1),
            run_at__lte=eta + datetime.timedelta(milliseconds=1),
        )
    elif isinstance(eta, tuple) and len(eta) == 2:
        earliest, latest = eta
        if earliest is not None:
            rows = rows.filter(run_at__gte=earliest)
        if latest is not None:
            rows = rows.filter(run_at__lte=latest)
    elif eta is not None:
        raise TypeError(
            f"eta= takes a datetime or a window (earliest, latest); got {eta!r}."
        )
    return rows


def _name_of(task: Any) -> str:
    if isinstance(task, str):
        return task
    if isinstance(task, registry.Task):
        return task.name
    # A function decorated elsewhere, or the Task's bare function.
    return registry.resolve(task).name


def _describe_filters(
    task: Any,
    args: Sequence[Any] | None,
    kwargs: dict[str, Any] | None,
    key: str | None,
    queue: str | None,
    priority: int | None,
    eta: Eta | None,
    meta: dict[str, Any] | None,
) -> str:
    given = {
        "task": None if task is None else _name_of(task),
        "args": None if args is None else list(args),
        "kwargs": kwargs,
        "key": key,
        "queue": queue,
        "priority": priority,
        "eta": eta,
        "meta": meta,
    }
    parts = [f"{name}={value!r}" for name, value in given.items() if value is not None]
    return ", ".join(parts) if parts else "no filter"


def _everything_scheduled() -> str:
    rows = list(
        DelayedTask.objects.using(write_db())
        .filter(status=Status.SCHEDULED)
        .order_by("run_at", "id")[:50]
    )
    if not rows:
        return "Nothing is scheduled."
    lines = [f"Scheduled ({len(rows)}{'+' if len(rows) == 50 else ''}):"]
    for row in rows:
        lines.append(
            f"  {row.name}(args={row.args!r}, kwargs={row.kwargs!r}) "
            f"key={row.key!r} queue={row.queue!r} priority={row.priority} "
            f"eta={row.run_at.isoformat()}"
            + (f" meta={row.meta!r}" if row.meta else "")
        )
    return "\n".join(lines)
