"""Reading what django-delayq wrote to Redis, as a user would inspect it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import redis

from django_delayq.models import DelayedTask
from django_delayq.store.keys import decode_member, shard_keys
from django_delayq.timing import to_score


def due_key(queue: str = "default", shard: int = 0, priority: int = 0) -> str:
    """The due-set of a shard's band: the band of ``priority``."""
    return shard_keys("delayq", queue, shard).due_of(priority)


def due_members(client: redis.Redis) -> dict[uuid.UUID, int]:
    """Every member of every due-set (every band's), as task id -> score."""
    members: dict[uuid.UUID, int] = {}
    for key in client.scan_iter(match="delayq:*:due*"):
        for member, score in client.zrange(key, 0, -1, withscores=True):
            members[decode_member(member)] = int(score)
    return members


def indexed_score(client: redis.Redis, task: DelayedTask) -> int | None:
    """The task's score in its own shard's due-set of its band, or None."""
    score = client.zscore(due_key(task.queue, task.shard, task.priority), task.pk.bytes)
    return None if score is None else int(score)


def expected_score(task: DelayedTask) -> int:
    return to_score(task.run_at)


def drain(rounds: int = 10) -> None:
    """Dispatch and work until nothing is left to do (bounded)."""
    from django_delayq.dispatcher import Dispatcher
    from django_delayq.worker import Worker

    for _ in range(rounds):
        moved = Dispatcher().run(once=True).moved
        processed = Worker().run(once=True).processed
        if not moved and not processed:
            return


def claim(row: DelayedTask, entry_id: str) -> int | None:
    """Claim ``row`` for the delivery ``entry_id``, as a worker does; the attempt."""
    from django.utils import timezone

    from django_delayq import transitions

    return transitions.claim(row, entry_id, timezone.now(), "test-worker", "default")


def refresh(task: DelayedTask) -> DelayedTask:
    """The task's row as the database has it now."""
    return DelayedTask.objects.get(pk=task.pk)


@contextlib.contextmanager
def declared_schedule(
    name: str, fn: Callable[..., Any], **options: Any
) -> Iterator[Any]:
    """A ``@periodic`` schedule of ``fn`` declared for the ``with`` block,
    forgotten (and its task unregistered) after it."""
    from django_delayq.recurring import periodic
    from django_delayq.recurring.declared import forget
    from django_delayq.registry import unregister

    registered = periodic(name=name, **options)(fn)
    try:
        yield registered
    finally:
        forget(name)
        unregister(name)


def database_env(settings_dict: dict[str, Any], test_db: str) -> dict[str, str]:
    """The environment that points a command started by a test (with the
    suite's settings) at the server of the test session's database."""
    if test_db == "postgres":
        prefix = "DELAYQ_PG"
    elif test_db == "mariadb":
        prefix = "DELAYQ_MARIADB"
    else:
        return {}
    return {
        f"{prefix}_HOST": str(settings_dict["HOST"]),
        f"{prefix}_PORT": str(settings_dict["PORT"]),
    }


def most_at_once(runs: Any) -> int:
    """The most runs (objects with ``started`` and ``ended`` times, as
    ``tests.testapp.models.Run``) under way at one moment."""
    events = sorted([(r.started, 1) for r in runs] + [(r.ended, -1) for r in runs])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


def schedule_ticks(name: str, **filters: Any) -> list[DelayedTask]:
    """The tick rows of the periodic schedule ``name``, by due time."""
    return list(
        DelayedTask.objects.filter(
            key__startswith=f"periodic:{name}@", **filters
        ).order_by("run_at")
    )


def tick_times(rows: list[DelayedTask]) -> list[str]:
    """The rows' due times as ``HH:MM:SS``, to compare at a glance."""
    return [row.run_at.strftime("%H:%M:%S") for row in rows]
