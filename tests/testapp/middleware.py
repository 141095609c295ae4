"""Middleware of the tests (DELAYQ["MIDDLEWARE"]): each notes what it saw in
the ledger, inside the run's transaction; and the schedule-time hooks
(``on_schedule()``) of the request id recipe and of the tests of hooks."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any
from uuid import uuid4

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from django_delayq.registry import Task
from django_delayq.worker.attempts import Handler, TaskRun
from tests.testapp.models import Ledger


class Outer:
    def __init__(self, run_task: Handler) -> None:
        self.run_task = run_task

    def __call__(self, run: TaskRun) -> Any:
        Ledger.objects.create(
            key=f"outer:{run.name}:{run.attempt}/{run.max_attempts}:{run.queue}",
            pid=0,
            at=timezone.now(),
        )
        value = self.run_task(run)
        return {"wrapped": value}


class Inner:
    def __init__(self, run_task: Handler) -> None:
        self.run_task = run_task

    def __call__(self, run: TaskRun) -> Any:
        Ledger.objects.create(key=f"inner:{run.args}", pid=0, at=timezone.now())
        return self.run_task(run)


class Refuses:
    """Fails every run of a task whose first argument is "refused"."""

    def __init__(self, run_task: Handler) -> None:
        self.run_task = run_task

    def __call__(self, run: TaskRun) -> Any:
        if run.args and run.args[0] == "refused":
            raise PermissionError("the tenant is suspended")
        return self.run_task(run)


class TakesNothing:
    def __init__(self) -> None:
        pass


#: The request under way, as a project's Django middleware sets it
#: (docs/guide/middleware.md, "A request id from the view to the task").
request_id: ContextVar[str | None] = ContextVar("request_id", default=None)


class RequestIdFromHeader:
    """Django's side of the recipe: a request middleware (in ``MIDDLEWARE``)
    that sets the request id while the request is handled."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = request_id.set(request.headers.get("X-Request-ID") or uuid4().hex)
        try:
            response: HttpResponse = self.get_response(request)
            return response
        finally:
            request_id.reset(token)


class RequestId:
    """The request id recipe: a task scheduled during a request carries its
    id in its metadata, and each run of the task has it back."""

    def __init__(self, run_task: Handler) -> None:
        self.run_task = run_task

    def on_schedule(self, task: Task[Any, Any], meta: dict[str, Any]) -> dict[str, Any]:
        rid = request_id.get()
        if rid is not None:
            meta.setdefault("request_id", rid)
        return meta

    def __call__(self, run: TaskRun) -> Any:
        token = request_id.set(run.meta.get("request_id"))
        try:
            return self.run_task(run)
        finally:
            request_id.reset(token)


class Tagging:
    """Appends its tag to the metadata's "tags" of every task scheduled."""

    tag = ""

    def __init__(self, run_task: Handler) -> None:
        self.run_task = run_task

    def on_schedule(self, task: Task[Any, Any], meta: dict[str, Any]) -> dict[str, Any]:
        return {**meta, "tags": [*meta.get("tags", []), f"{self.tag}:{task.name}"]}

    def __call__(self, run: TaskRun) -> Any:
        return self.run_task(run)


class TagA(Tagging):
    tag = "a"


class TagB(Tagging):
    tag = "b"


class Picky:
    """An ``on_schedule()`` that goes wrong as the call's metadata asks
    ("hook"): raises, returns None, or returns what JSON cannot hold."""

    def __init__(self, run_task: Handler) -> None:
        self.run_task = run_task

    def on_schedule(self, task: Task[Any, Any], meta: dict[str, Any]) -> Any:
        wanted = meta.get("hook")
        if wanted == "raise":
            raise PermissionError("no tenant in this context")
        if wanted == "none":
            return None
        if wanted == "unstorable":
            return {**meta, "seen": {1, 2}}
        return meta

    def __call__(self, run: TaskRun) -> Any:
        return self.run_task(run)


class HookNotCallable:
    def __init__(self, run_task: Handler) -> None:
        self.run_task = run_task

    on_schedule = "tenant"

    def __call__(self, run: TaskRun) -> Any:
        return self.run_task(run)


class Keeps:
    """Keeps each run it sees, in :attr:`runs`."""

    runs: list[TaskRun] = []

    def __init__(self, run_task: Handler) -> None:
        self.run_task = run_task

    def __call__(self, run: TaskRun) -> Any:
        self.runs.append(run)
        return self.run_task(run)
