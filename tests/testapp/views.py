"""Async views that call the async API, as a project's would: each reads its
arguments from a JSON body, and lets an error propagate (the test client
raises it again in the test)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.http import HttpRequest, JsonResponse

from django_delayq import (
    Call,
    acancel,
    areschedule,
    aretry,
    aschedule,
    aschedule_many,
)


def _body(request: HttpRequest) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(request.body or b"{}")
    return body


async def schedule_view(request: HttpRequest) -> JsonResponse:
    body = _body(request)
    task = await aschedule(body.pop("task"), **body)
    return JsonResponse({"id": str(task.pk), "status": task.status})


async def schedule_many_view(request: HttpRequest) -> JsonResponse:
    body = _body(request)
    calls = [Call(item.pop("task"), **item) for item in body.pop("calls")]
    tasks = await aschedule_many(calls, **body)
    return JsonResponse({"ids": [str(task.pk) for task in tasks]})


async def cancel_view(request: HttpRequest) -> JsonResponse:
    body = _body(request)
    cancelled = await acancel(body.pop("id", None), **body)
    return JsonResponse({"cancelled": cancelled})


async def reschedule_view(request: HttpRequest) -> JsonResponse:
    body = _body(request)
    task = await areschedule(body.pop("id", None), **body)
    return JsonResponse({"id": str(task.pk), "run_at": task.run_at.isoformat()})


async def retry_view(request: HttpRequest) -> JsonResponse:
    body = _body(request)
    task = await aretry(body.pop("id"), **body)
    return JsonResponse({"id": str(task.pk), "status": task.status})


class ViewFailed(Exception):
    """What :func:`schedule_in_transaction_view` raises when asked to fail."""


@contextlib.asynccontextmanager
async def atomic_on_the_connection_thread() -> AsyncIterator[None]:
    """``transaction.atomic()`` around async code: entered and left on the
    thread that holds the request's connection, where ``aschedule()`` writes."""
    block = transaction.atomic()
    await sync_to_async(block.__enter__, thread_sensitive=True)()
    try:
        yield
    except BaseException as exc:
        leave = sync_to_async(block.__exit__, thread_sensitive=True)
        if not await leave(type(exc), exc, exc.__traceback__):
            raise
    else:
        await sync_to_async(block.__exit__, thread_sensitive=True)(None, None, None)


async def schedule_in_transaction_view(request: HttpRequest) -> JsonResponse:
    """Schedule inside a transaction that commits, or, with ``"fail": true``,
    that the view's error rolls back."""
    body = _body(request)
    fail = body.pop("fail", False)
    async with atomic_on_the_connection_thread():
        task = await aschedule(body.pop("task"), **body)
        if fail:
            raise ViewFailed(f"the view failed after scheduling {task.pk}")
    return JsonResponse({"id": str(task.pk)})


async def enqueue_view(request: HttpRequest) -> JsonResponse:
    """A ``django.tasks`` task enqueued on DelayQueueBackend from async code,
    and its result read back, with the framework's own async methods."""
    from tests.testapp.django_tasks import add

    body = _body(request)
    result = await add.aenqueue(*body["args"])
    again = await add.aget_result(result.id)
    return JsonResponse({"id": result.id, "status": again.status})
