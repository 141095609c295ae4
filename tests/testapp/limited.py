"""Tasks under concurrency and rate limits, on the queue "limited".

Registered only while a test of limits runs (see tests/limits/conftest.py),
and in the processes those tests start (through ``DELAYQ_TEST_LIMITED``,
see apps.py); the queue exists only in those tests' settings, so no other
test meets a limits shard.
"""

from __future__ import annotations

import os
import time

from django_delayq import task

QUEUE = "limited"


def _run(key: str, seconds: float) -> str:
    from tests.testapp.models import Run

    started = time.time()
    time.sleep(seconds)
    Run.objects.create(key=key, pid=os.getpid(), started=started, ended=time.time())
    return key


@task(queue=QUEUE, concurrency_limit=2)
def two_at_once(key: str, seconds: float = 0.0) -> str:
    return _run(key, seconds)


@task(queue=QUEUE, concurrency_limit=1, limit_by="order_id")
def one_per_order(order_id: int, key: str, seconds: float = 0.0) -> str:
    return _run(key, seconds)


@task(queue=QUEUE, rate_limit="5/s")
def five_a_second(key: str) -> str:
    return _run(key, 0.0)


@task(
    queue=QUEUE, concurrency_limit=1, limit_by=lambda tenant, key, seconds=0.0: tenant
)
def one_per_tenant(tenant: str, key: str, seconds: float = 0.0) -> str:
    return _run(key, seconds)


def _sender(message: dict[str, str]) -> str:
    return message["sender"]  # a KeyError for a message without one


@task(queue=QUEUE, rate_limit="100/s", limit_by=_sender)
def per_sender(message: dict[str, str]) -> None:
    """Its key function raises on some arguments."""


@task(queue=QUEUE)
def unlimited_on_a_limited_queue(key: str, seconds: float = 0.0) -> str:
    return _run(key, seconds)


#: Every task of this module.
TASKS = [
    two_at_once,
    one_per_order,
    five_a_second,
    one_per_tenant,
    per_sender,
    unlimited_on_a_limited_queue,
]
