"""Which limits a task is under, and the rules the scripts judge by.

A task row is under limits when its task declares ``concurrency_limit`` or
``rate_limit``, or its queue does (``DELAYQ["QUEUES"][name]``); such a row
is indexed in its queue's limits shard (:data:`~..store.keys.LIMITS_SHARD`).
Its *group* names those limits, each with its key when the task counts them
``limit_by`` a value of its arguments: ``lua/limits.lua`` admits a group's
tasks in order, and takes turns between groups.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from collections.abc import Sequence
from typing import Any

from .. import registry
from ..conf import get_settings
from ..conf.limits import Rule
from ..conf.settings import QueueSettings
from ..exceptions import InvalidArgument, RedisUnavailable, TaskNotRegistered
from ..store import limits
from ..store.connection import Client
from ..store.keys import LIMITS_SHARD, shard_keys

logger = logging.getLogger(__name__)

#: The class of a queue's own limits.
QUEUE = "queue"
LIMIT_SEPARATOR = "\x1e"
KEY_SEPARATOR = "\x1f"
#: A key value kept as it is in Redis' key names (and shown so); any other
#: is hashed.
_PLAIN_KEY = re.compile(r"^[\w.:@/+=-]{1,64}$")


def task_class(name: str) -> str:
    return f"task:{name}"


def is_limited(task: registry.Task[Any, Any], queue: QueueSettings) -> bool:
    """Whether a task scheduled on ``queue`` is under a limit."""
    return bool(task.limit_rule) or bool(queue.limits)


def limit_key(
    task: registry.Task[Any, Any], args: Sequence[Any], kwargs: dict[str, Any]
) -> str | None:
    """The key a call's limits are counted per (``limit_by``), or None;
    raise :class:`~..exceptions.InvalidArgument` naming the task if it
    cannot be found."""
    if task.limit_key is None:
        return None
    try:
        value = task.limit_key(tuple(args), dict(kwargs))
    except Exception as exc:
        raise InvalidArgument(
            f"{task.name}: its limit_by could not find the key of this call "
            f"({type(exc).__name__}: {exc}). Nothing was written."
        ) from exc
    if (
        isinstance(task.limit_by, str)
        and isinstance(value, int | str)
        and not isinstance(value, bool)
    ):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise InvalidArgument(
            f"{task.name}: limit_by must give a non-empty str (an int "
            f"argument is taken as its digits) for the limit's key; got "
            f"{value!r}. Nothing was written."
        )
    return value


def group_of(
    task: registry.Task[Any, Any],
    queue: QueueSettings,
    args: Sequence[Any],
    kwargs: dict[str, Any],
) -> str:
    """The group of a call: every limit it is under, with its key."""
    limits = []
    if task.limit_rule:
        limit = task_class(task.name)
        key = limit_key(task, args, kwargs)
        if key is not None:
            limit += KEY_SEPARATOR + _key_name(key)
        limits.append(limit)
    if queue.limits:
        limits.append(QUEUE)
    return LIMIT_SEPARATOR.join(limits)


def _key_name(key: str) -> str:
    if _PLAIN_KEY.match(key):
        return key
    return "#" + hashlib.sha1(key.encode()).hexdigest()[:20]


def rules_of(queue: QueueSettings) -> dict[str, Rule]:
    """Every rule a task of ``queue`` may be under: the queue's, and those
    of the registered tasks of that queue (a task with limits runs on its
    own queue only)."""
    rules = {
        task_class(task.name): task.limit_rule
        for task in registry.all_tasks().values()
        if task.limit_rule and (task.queue or "default") == queue.name
    }
    if queue.limits:
        rules[QUEUE] = queue.limits
    return rules


def limited_queues(client: Client | None = None) -> set[str]:
    """The configured queues that have a limits shard: those with limits of
    their own, and those of tasks with limits (which run on their own
    queue only, so that one counter holds each limit).

    With ``client``, also those whose limits shard still indexes tasks,
    though no limit is declared for them any more (a deploy removed it):
    the loops serve it until it drains, its tasks admitted at once. A Redis
    that does not answer adds none.
    """
    settings = get_settings()
    names = {name for name, queue in settings.queues.items() if queue.limits}
    names.update(
        task.queue or "default"
        for task in registry.all_tasks().values()
        if task.limit_rule
    )
    names &= set(settings.queues)
    if client is not None:
        others = [
            shard_keys(settings.key_prefix, name, LIMITS_SHARD)
            for name in settings.queues
            if name not in names
        ]
        with contextlib.suppress(RedisUnavailable):  # serves none, as before
            names.update(keys.queue for keys in limits.holding(client, others))
    return names


def shard_numbers(queue: QueueSettings, limited: set[str]) -> list[int]:
    """The shards of ``queue`` a loop serves: its own, and its limits
    shard when it is one of ``limited`` (:func:`limited_queues`)."""
    numbers = list(range(queue.shards))
    if queue.name in limited:
        numbers.append(LIMITS_SHARD)
    return numbers


#: The key of a stored row whose ``limit_by`` no longer finds one (a key
#: function changed by a deploy, or that depends on more than the
#: arguments): such rows share one count of the task's limits.
UNKEYED = "#unkeyed"


def group_of_row(row: Any) -> str | None:
    """The group of a stored row, by the rules deployed now; None if its
    task is not registered (the worker dead-letters it)."""
    try:
        task = registry.get(row.name)
    except TaskNotRegistered:
        return None
    queue = get_settings().queues.get(row.queue)
    if queue is None:
        return None
    try:
        return group_of(task, queue, row.args, row.kwargs)
    except InvalidArgument as exc:
        # Still under its limits: counted with the others whose key could
        # not be found, never admitted without them.
        logger.warning(
            "task %s (%s): its limit_by no longer finds the key of its "
            "arguments (%s); counted under the key %s",
            row.pk,
            row.name,
            repr(exc.__cause__) if exc.__cause__ is not None else "not a str",
            UNKEYED,
        )
        limits = [task_class(task.name) + KEY_SEPARATOR + UNKEYED]
        if queue.limits:
            limits.append(QUEUE)
        return LIMIT_SEPARATOR.join(limits)


def rows_rules(queue_name: str) -> dict[str, Rule]:
    """:func:`rules_of` by queue name."""
    return rules_of(get_settings().queue(queue_name))
