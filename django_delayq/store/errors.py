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
    "FAILED",
    "Answers",
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


#: What a call of :meth:`Answers.call` that failed returns.
FAILED: Any = object()


class Answers:
    """Redis calls made shard by shard, of which some may fail alone.

    On a Redis Cluster each shard is one slot, served by one node: while a
    node fails over, the calls of its shards fail and the others answer, so
    a loop goes on with the shards that answer. On one Redis every call fails
    alike. So a failed call is remembered and the loop goes on; only when no
    call answered does the last error stand for them all
    (:meth:`raise_if_none_answered`).
    """

    def __init__(self) -> None:
        self.answered = False
        self.error: RedisUnavailable | None = None

    def call(self, function: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """``function(*args, **kwargs)``, or :data:`FAILED` if Redis failed."""
        try:
            result = function(*args, **kwargs)
        except RedisUnavailable as exc:
            self.failed(exc)
            return FAILED  # type: ignore[no-any-return]
        self.answer()
        return result

    def answer(self) -> None:
        """A call answered."""
        self.answered = True

    def failed(self, exc: RedisUnavailable, *, answered: bool = False) -> None:
        """A call failed with ``exc``; ``answered`` if Redis did answer it,
        with an error (a key of the wrong type)."""
        self.error = exc
        self.answered = self.answered or answered

    def raise_if_none_answered(self) -> None:
        """Raise the last error if no call answered (Redis is down)."""
        if self.error is not None and not self.answered:
            raise self.error
