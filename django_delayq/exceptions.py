"""Exceptions raised by django-delayq.

Every exception derives from :class:`DelayQueueException`. Where Python users
expect a built-in category (a wrong type, a bad value, a missing name) the
exception also derives from that built-in, so ``except ValueError`` keeps
working.
"""

from __future__ import annotations

from typing import Any

import redis
from django.core.exceptions import ImproperlyConfigured


class DelayQueueException(Exception):
    """Base class of every exception django-delayq raises."""


class InvalidConfiguration(DelayQueueException, ImproperlyConfigured):
    """The ``DELAYQ`` setting (or a related one) is wrong."""


class KeyPrefixInUse(InvalidConfiguration):
    """Another project's tasks are indexed under ``KEY_PREFIX`` on this Redis
    (``delayq.E014``)."""


class InvalidTaskDefinition(DelayQueueException, TypeError):
    """``@task`` was applied to something that cannot be a task."""


class TaskNotRegistered(DelayQueueException, LookupError):
    """A task name is not in the registry, so it can never run."""


class UnknownQueue(DelayQueueException, LookupError):
    """A queue name is not configured in ``DELAYQ["QUEUES"]``."""


class InvalidSchedule(DelayQueueException, ValueError):
    """``delay`` / ``eta`` / ``expires`` do not describe a valid moment, or
    one a task could run at (an expiry not after it is due)."""


class InvalidPayload(DelayQueueException, ValueError):
    """``args`` / ``kwargs`` (or ``meta``) cannot be stored as JSON."""


class UnsupportedPayloadType(InvalidPayload, TypeError):
    """A value (or a key, or ``args``/``kwargs`` themselves) is of a type
    JSON cannot hold: a set, a datetime, an object... Also a ``TypeError``,
    as Django's Tasks framework raises for such arguments.

    The message opens with what is wrong where, and the fix (``args[0] is a
    datetime, which is not JSON serializable; pass value.isoformat() ...``),
    and ends with the words of Django's backends (``(Unsupported type:
    <class 'datetime.datetime'>)``)."""


class PayloadTooLarge(InvalidPayload):
    """The encoded ``args`` and ``kwargs`` exceed ``MAX_PAYLOAD_BYTES``, or a
    task's ``meta`` exceeds the metadata limit (4 KiB)."""


class ResultTooLarge(InvalidPayload):
    """A task's return value encodes to more than ``MAX_RESULT_BYTES``."""


class InvalidArgument(DelayQueueException, ValueError):
    """Another argument (``key``, ``max_attempts``, ...) has a bad value."""


class TaskRefused(DelayQueueException):
    """A task may not run as this row asks: the task of a
    ``DELAYQ["PERIODIC"]`` entry runs only as its schedule's ticks, with the
    arguments the entry declares. ``schedule()`` raises it and writes
    nothing; a worker that reads such a row fails it with this error and
    does not call the function."""


class DuplicateTask(DelayQueueException):
    """An active (scheduled or running) task already holds the dedupe key."""

    def __init__(self, message: str, *, key: str, existing_id: object = None) -> None:
        super().__init__(message)
        self.key = key
        self.existing_id = existing_id


class TaskNotFound(DelayQueueException, LookupError):
    """No task matches the given id or key."""


class InvalidTaskState(DelayQueueException):
    """The task is in a state that does not allow the operation."""


class RedisUnavailable(DelayQueueException, redis.RedisError):
    """Redis did not carry out a command of django-delayq.

    Raised for every failure of a single Redis, a Sentinel-managed primary
    or a Redis Cluster alike (no connection, a timeout, no primary, a slot
    without a node, a write refused); the original redis-py error is the
    ``__cause__``. It also derives from ``redis.RedisError``, so code that
    catches that keeps working.
    """

    def __init__(
        self, cause: BaseException | str, *, unreachable: bool = False
    ) -> None:
        if isinstance(cause, BaseException):
            unreachable = isinstance(
                cause, redis.ConnectionError | redis.TimeoutError | OSError
            )
            cause = f"{type(cause).__name__}: {cause}"
        super().__init__(cause)
        #: True when Redis could not be reached or did not answer in time (a
        #: socket error, a timeout, no node or no primary), rather than
        #: answering with an error.
        self.unreachable = unreachable

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with its message and flag (a multiprocessing queue, a
        # test runner's worker), not with a cause that may not pickle.
        return (type(self), (str(self),), {"unreachable": self.unreachable})


class RedisPermissionDenied(RedisUnavailable):
    """Redis refused a command or a key to django-delayq's ACL user
    (``NOPERM``): a configuration error, which no retry mends.

    Its message names what was refused (a command, or a key) and what to
    grant. The looping commands log it as an error and retry, so that an
    ``ACL SETUSER`` on the server mends them; a one-off pass (``--once``)
    stops on it.
    """


class TimeLimitExceeded(BaseException):
    """Raised inside a task's function when it runs past its time limit.

    A ``BaseException``, like ``KeyboardInterrupt``, so that a task's own
    ``except Exception:`` cannot swallow it; ``finally:`` blocks and
    ``with`` statements still clean up. The attempt fails, and the retry
    policy applies.
    """


class TaskCancelled(BaseException):
    """Raised inside a task's function whose task was cancelled while it ran:
    by :func:`~django_delayq.raise_if_cancelled` at a checkpoint of the
    task's own, or by the worker once the grace period after the cancel
    (``DELAYQ["CANCEL_GRACE"]``) has run out.

    A ``BaseException``, like :class:`TimeLimitExceeded`, so that a task's
    own ``except Exception:`` cannot swallow it; ``finally:`` blocks and
    ``with`` statements still clean up. Nothing is recorded: the row is
    already ``cancelled``, and an atomic task's writes are rolled back.
    """


class MetricsUnavailable(DelayQueueException, ImportError):
    """Metrics were asked for, and prometheus-client is not installed: install
    ``django-delayq[prometheus]``."""


class WorkerStuck(DelayQueueException):
    """A task ran past its time limit and could not be interrupted.

    Its attempt was failed and the tasks claimed with it were handed back;
    the process must exit so that a fresh one replaces it
    (``delayq_worker`` exits with status 70).
    """


class TooManyRuns(DelayQueueException):
    """:func:`django_delayq.testing.run_due` ran its ``max_runs`` attempts
    and tasks were still due: most likely a task that schedules itself (or
    another) every time it runs. Pass an earlier ``until=`` or a larger
    ``max_runs=``."""
