"""The one exception the rest of django-delayq sees from Redis.

A single Redis, a Sentinel-managed primary and a Redis Cluster each fail in
their own words: ``ConnectionError`` and ``TimeoutError`` from a socket,
``MasterNotFoundError`` while the sentinels elect a primary,
``RedisClusterException`` (raised as :class:`.cluster.ClusterUnavailable`)
while a slot has no node, ``READONLY`` from a demoted primary, ``OOM`` or
``LOADING`` from a primary that refuses writes for now. To the dispatcher,
worker and sweeper loops all of them mean the same thing: the command did
not happen, log it, back off, try again. Every function of this package that
talks to Redis therefore raises them as :class:`RedisUnavailable`, the way
Django's database layer raises every driver's errors as its own
``DatabaseError`` classes; the loops catch that one class and never import
redis-py.

Errors the store handles itself (``NOSCRIPT``, ``BUSYGROUP``, ``NOGROUP``)
never leave it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

import redis

from ..exceptions import RedisPermissionDenied, RedisUnavailable

__all__ = [
    "RedisPermissionDenied",
    "RedisUnavailable",
    "error_text",
    "log_level",
    "translated",
]

#: What an ACL denial is followed by, so the log says what to do about it.
GRANT_HINT = (
    "grant it to the Redis ACL user (the ACL django-delayq needs is in its "
    "Redis reference, docs/reference/redis.md)"
)

P = ParamSpec("P")
R = TypeVar("R")


def translated(function: Callable[P, R]) -> Callable[P, R]:
    """Raise the Redis errors ``function`` lets through as
    :class:`RedisUnavailable` (also while iterating, for a generator)."""
    if inspect.isgeneratorfunction(function):
        generator: Callable[..., Iterator[Any]] = function

        @functools.wraps(function)
        def iterate(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with _translating():
                yield from generator(*args, **kwargs)

        return iterate  # type: ignore[return-value]

    @functools.wraps(function)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        with _translating():
            return function(*args, **kwargs)

    return call


@contextlib.contextmanager
def _translating() -> Iterator[None]:
    try:
        yield
    except RedisUnavailable:
        raise
    except redis.exceptions.NoPermissionError as exc:
        raise RedisPermissionDenied(
            f"{type(exc).__name__}: {exc}; {GRANT_HINT}"
        ) from exc
    except (redis.RedisError, OSError) as exc:
        raise RedisUnavailable(exc) from exc


def log_level(exc: BaseException, usual: int = logging.WARNING) -> int:
    """How loudly a loop logs ``exc`` before it retries: at ``usual``, but an
    ACL denial, a configuration error rather than a passing outage, always
    as an error."""
    return logging.ERROR if isinstance(exc, RedisPermissionDenied) else usual


def error_text(exc: BaseException) -> str:
    """``"Type: message"`` for a log line or a stored error; a
    :class:`RedisUnavailable` is named after the redis-py error it stands
    for (``"ConnectionError: ..."``)."""
    if isinstance(exc, RedisUnavailable):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
