"""Tasks written for Celery; only their import line names django-delayq.

A Celery project switches by changing
``from celery import shared_task`` to the line below.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.utils import timezone

from django_delayq.contrib.celery import shared_task
from tests.testapp.models import Ledger

#: attempts each key has made (this process only)
calls: dict[str, int] = {}


def _count(key: str) -> int:
    calls[key] = calls.get(key, 0) + 1
    return calls[key]


@shared_task
def add(x: int, y: int) -> int:
    return x + y


@shared_task(bind=True, max_retries=2, default_retry_delay=30)
def send_reminder(self: Any, key: str, failures: int = 0) -> dict[str, Any]:
    """Fails ``failures`` times, retrying itself each time."""
    attempt = _count(key)
    if attempt <= failures:
        raise self.retry(exc=ConnectionError(f"attempt {attempt} failed"))
    Ledger.objects.create(key=key, pid=0, at=self.request.eta or timezone.now())
    return {"id": self.request.id, "retries": self.request.retries}


@shared_task(
    autoretry_for=(TimeoutError,),
    retry_backoff=True,
    retry_jitter=False,
    retry_kwargs={"max_retries": 3},
)
def call_gateway(key: str, failures: int) -> int:
    attempt = _count(key)
    if attempt <= failures:
        raise TimeoutError(f"attempt {attempt} timed out")
    return attempt


@shared_task(max_retries=5)
def breaks(key: str) -> None:
    """Raises what no option retries."""
    _count(key)
    raise ValueError("bad input")


@shared_task(ignore_result=True, queue="orders", priority=5)
def fire_and_forget(key: str) -> str:
    Ledger.objects.create(key=key, pid=0, at=timezone.now())
    return key


@shared_task(bind=True)
def retries_beyond(self: Any, key: str) -> int:
    """Asks for more retries than the task's max_retries (3)."""
    attempt = _count(key)
    if attempt <= 5:
        raise self.retry(countdown=1, max_retries=6)
    return attempt


@shared_task(bind=True)
def naive_eta(self: Any) -> None:
    """Asks for a retry at a naive time, ten minutes from now."""
    later = timezone.localtime() + datetime.timedelta(minutes=10)
    raise self.retry(eta=later.replace(tzinfo=None))


@shared_task(bind=True)
def retry_without_throw(self: Any) -> None:
    self.retry(countdown=1, throw=False)


@shared_task(bind=True, autoretry_for=(Exception,), max_retries=5)
def updates_state(self: Any) -> None:
    self.update_state(state="PROGRESS", meta={"done": 1})


@shared_task(bind=True, max_retries=3, autoretry_for=(ConnectionError,))
def in_a_worker(self: Any, key: str) -> dict[str, Any]:
    """Fails its first two attempts (in a worker process: a retry starts
    afresh there, so the attempt number comes from the request)."""
    Ledger.objects.create(key=f"{key}:{self.request.retries}", pid=0, at=timezone.now())
    if self.request.retries < 2:
        raise self.retry(countdown=0.2, exc=ConnectionError("gateway down"))
    return {"id": self.request.id, "retries": self.request.retries}


@shared_task(bind=True)
def reads_headers(self: Any) -> Any:
    """Returns ``self.request.headers``: its ``apply_async(headers=...)``."""
    return self.request.headers
