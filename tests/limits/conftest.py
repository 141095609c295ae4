"""The queue "limited" and the processes that serve it, in this process."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from django_delayq import registry
from django_delayq.dispatcher import Dispatcher
from django_delayq.worker import Worker
from tests.testapp import limited

# Registered by the import; registered again only while a test of limits
# runs, so that no other test of this process meets their queue.
for _task in limited.TASKS:
    registry.unregister(_task.name)


@pytest.fixture
def limited_queue(settings: Any, redis_client: Any) -> Iterator[dict[str, Any]]:
    """The queue "limited" configured and its tasks registered (its own
    limits: none, unless a test sets them through the dict this yields and
    calls ``apply()``)."""
    options: dict[str, Any] = {}

    def apply() -> None:
        settings.DELAYQ = {
            **settings.DELAYQ,
            "QUEUES": {**settings.DELAYQ["QUEUES"], "limited": dict(options)},
        }

    apply()
    for task in limited.TASKS:
        registry.register(task)
    try:
        yield {"options": options, "apply": apply}
    finally:
        for task in limited.TASKS:
            registry.unregister(task.name)


@contextlib.contextmanager
def serving(*, workers: int = 1, threads: int = 4) -> Iterator[list[Worker]]:
    """A dispatcher and ``workers`` workers of ``threads`` threads on the
    queue "limited", each in a thread of this process, stopped on exit."""
    dispatcher = Dispatcher(["limited"], lease_ttl=5.0)
    crew = [Worker(["limited"], concurrency=threads) for _ in range(workers)]
    running = [threading.Thread(target=dispatcher.run, daemon=True)] + [
        threading.Thread(target=w.run, daemon=True) for w in crew
    ]
    for thread in running:
        thread.start()
    try:
        yield crew
    finally:
        dispatcher.stop()
        for w in crew:
            w.stop()
        for thread in running:
            thread.join(timeout=30)
