"""Middleware of the tests (DELAYQ["MIDDLEWARE"]): each notes what it saw in
the ledger, inside the run's transaction."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

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
