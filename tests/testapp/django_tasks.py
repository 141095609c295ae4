"""Tasks of Django's Tasks framework, run by DelayQueueBackend.

Not a ``tasks`` module on purpose: ``tests.testapp.tasks`` imports it, the
way a project keeps its tasks in several modules, and that is how a worker
(which imports nothing but tasks modules) has it loaded.
"""

from __future__ import annotations

import os
from typing import Any

from django.utils import timezone

try:  # Django 6.0+
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import TaskContext, task  # type: ignore[no-redef]

from tests.testapp.models import Ledger, Order


class Boom(RuntimeError):
    """Raised by the failing tasks, to find in TaskResult.errors."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="orders")
def record(key: str) -> dict[str, Any]:
    """Note this execution in the ledger; return when it ran."""
    at = timezone.now()
    Ledger.objects.create(key=key, pid=os.getpid(), at=at)
    return {"key": key, "pid": os.getpid(), "at": at.isoformat()}


@task(takes_context=True)
def flaky(context: TaskContext, key: str) -> dict[str, Any]:
    """Fail the first attempt; report what the context said each time."""
    Ledger.objects.create(
        key=f"{key}:{context.attempt}", pid=os.getpid(), at=timezone.now()
    )
    if context.attempt == 1:
        raise Boom("first attempt fails")
    result = context.task_result
    return {
        "attempt": context.attempt,
        "id": result.id,
        "status": str(result.status),
        "backend": result.backend,
        "args": result.args,
    }


@task
def fails(message: str) -> None:
    raise Boom(message)


@task
def create_order(status: str) -> int:
    """Write an order, then fail if asked: the write must roll back with it."""
    order = Order.objects.create(status=status)
    if status == "fail":
        raise Boom("after the write")
    return order.pk


@task(backend="non_atomic")
def create_order_non_atomic(status: str) -> int:
    order = Order.objects.create(status=status)
    if status == "fail":
        raise Boom("after the write")
    return order.pk


@task
async def async_create_order(status: str) -> int:
    order = await Order.objects.acreate(status=status)
    if status == "fail":
        raise Boom("after the write")
    return order.pk


@task
def returns_a_set() -> Any:
    return {1, 2}


@task
def returns_int_keys() -> Any:
    return {1: (2, 3), "b": b"bytes"}


@task
def returns_nan() -> Any:
    return {"ratio": float("nan")}


@task(backend="elsewhere")
def declared_elsewhere() -> None:
    """Declared for another backend: no DelayQueueBackend worker may run it."""
    Order.objects.create(status="elsewhere")


def not_a_task() -> None:
    Order.objects.create(status="not-a-task")


@task
def returns_text(chars: int) -> str:
    return "r" * chars
