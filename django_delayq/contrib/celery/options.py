"""Celery's task options, each mapped to django-delayq's or refused by name.

:func:`task_options` reads the keyword arguments of ``@shared_task`` into
the options of a django-delayq task and a :class:`RetryPolicy` (what Celery
does on a failure, which django-delayq's ``@task`` leaves to
``DELAYQ["RETRY_BACKOFF"]``). Nothing is ignored in silence: an option this
module does not know, or one django-delayq cannot honour, raises
:class:`~django_delayq.exceptions.InvalidTaskDefinition` naming it and what
to use instead. :data:`CALL_OPTIONS` and :func:`refused_call_option` do the
same for ``apply_async()``.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
from collections.abc import Mapping
from typing import Any

from ...exceptions import InvalidArgument, InvalidTaskDefinition
from ...options import MAX_ATTEMPTS_LIMIT

#: Celery's defaults: ``Task.max_retries`` and ``Task.default_retry_delay``.
CELERY_MAX_RETRIES = 3
CELERY_RETRY_DELAY = 180.0
#: Celery's ``retry_backoff_max`` default, in seconds.
CELERY_BACKOFF_MAX = 600

#: What to write instead of a Celery option django-delayq cannot honour.
REFUSED_TASK_OPTIONS: Mapping[str, str] = {
    "typing": "django-delayq always checks a call's arguments against the "
    "function's signature when it is scheduled; remove it",
    "serializer": "django-delayq stores arguments as JSON in the task's row; remove it",
    "compression": "arguments are stored in the database, uncompressed; remove it",
    "track_started": "a running task's status is always 'running' (STARTED); remove it",
    "store_errors_even_if_ignored": "errors are always kept on the task's row; "
    "remove it",
    "reject_on_worker_lost": "a task whose worker was lost is retried while "
    "it has attempts left; remove it",
    "throws": "remove throws=...: every failure is logged with its traceback",
    "base": "custom Task classes are not supported; move the behaviour into "
    "the function, or into a signal receiver (django_delayq.signals)",
    "lazy": "remove it",
    "acks_on_failure_or_timeout": "a failed or timed-out attempt is always "
    "settled (retried or failed, as the task's retry options say); remove "
    "it",
    "acks_on_failure": "a failed attempt is always settled (retried or failed); "
    "remove it",
    "acks_on_timeout": "an attempt past its time limit is always settled "
    "(retried or failed); remove it",
    "retry_on_worker_lost": "an attempt whose worker was lost is always run "
    "again while the task has attempts left; remove it",
    "shadow": "remove shadow=...: the name is the task's name=",
}

#: ``@shared_task`` keyword arguments this module maps.
MAPPED_TASK_OPTIONS = frozenset(
    {
        "bind",
        "name",
        "queue",
        "priority",
        "max_retries",
        "default_retry_delay",
        "autoretry_for",
        "dont_autoretry_for",
        "retry_backoff",
        "retry_backoff_max",
        "retry_jitter",
        "retry_kwargs",
        "time_limit",
        "soft_time_limit",
        "rate_limit",
        "ignore_result",
        "acks_late",
        "atomic",
        "expires",
    }
)

#: ``apply_async()`` keyword arguments this module maps (with ``args`` and
#: ``kwargs``); ``key`` is django-delayq's dedupe key, and ``headers`` the
#: task's metadata (``meta=``), which ``self.request.headers`` reads.
CALL_OPTIONS = frozenset(
    {"countdown", "eta", "expires", "queue", "priority", "key", "headers"}
)

#: What to write instead of an ``apply_async()`` option django-delayq cannot
#: honour.
REFUSED_CALL_OPTIONS: Mapping[str, str] = {
    "link": "callbacks are not supported; schedule the next task at the end "
    "of this one",
    "link_error": "error callbacks are not supported; connect a receiver to "
    "django_delayq.signals.task_failed",
    "task_id": "ids are made by django-delayq; pass key=... (a dedupe key) to "
    "schedule a task at most once",
    "retry": "scheduling never needs a retry: the row is written in your "
    "transaction and a failed Redis write goes to the outbox; remove it",
    "retry_policy": "scheduling never needs a retry; remove it",
    "routing_key": "pass queue=... instead",
    "exchange": "pass queue=... instead",
    "serializer": "arguments are stored as JSON; remove it",
    "compression": "remove it",
    "time_limit": "set time_limit=... on @shared_task",
    "soft_time_limit": "set soft_time_limit=... on @shared_task",
    "ignore_result": "set ignore_result=... on @shared_task",
    "shadow": "remove it",
    "chain": "chains are not supported; schedule the next task at the end of this one",
    "add_to_parent": "remove it",
    "producer": "tasks are written to the database, not published; remove it",
    "connection": "tasks are written to the database, not published; remove it",
}


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """What a Celery task does when it fails (Celery's task attributes)."""

    max_retries: int | None = CELERY_MAX_RETRIES
    default_retry_delay: float = CELERY_RETRY_DELAY
    autoretry_for: tuple[type[BaseException], ...] = ()
    dont_autoretry_for: tuple[type[BaseException], ...] = ()
    #: False, or the backoff factor in seconds (True is 1)
    retry_backoff: float = 0
    retry_backoff_max: float = CELERY_BACKOFF_MAX
    retry_jitter: bool = True
    #: ``countdown`` and ``max_retries`` for the retries of ``autoretry_for``
    retry_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def autoretries(self, exc: BaseException) -> bool:
        return isinstance(exc, self.autoretry_for) and not isinstance(
            exc, self.dont_autoretry_for
        )

    def autoretry_countdown(self, retries: int) -> float:
        """Seconds before the next automatic retry, as Celery computes them:
        ``retry_backoff * 2 ** retries`` capped at ``retry_backoff_max`` and,
        with ``retry_jitter``, a random value from 0 to that; without
        ``retry_backoff``, ``retry_kwargs["countdown"]`` or
        ``default_retry_delay``."""
        if not self.retry_backoff:
            return float(self.retry_kwargs.get("countdown", self.default_retry_delay))
        # Celery's integers: a factor of at least 1, a whole maximum.
        factor = int(max(1.0, self.retry_backoff))
        countdown = min(int(self.retry_backoff_max), factor * 2**retries)
        if self.retry_jitter:
            countdown = random.randrange(countdown + 1)
        return max(0.0, float(countdown))


def max_attempts_of(max_retries: int | None) -> int:
    """django-delayq counts attempts, Celery counts retries: ``max_retries``
    of N is N + 1 attempts; None (retry for ever) is the most a row allows."""
    if max_retries is None:
        return MAX_ATTEMPTS_LIMIT
    return min(max_retries + 1, MAX_ATTEMPTS_LIMIT)


def task_options(
    fn_name: str, given: Mapping[str, Any]
) -> tuple[dict[str, Any], RetryPolicy, bool, bool, float | datetime.timedelta | None]:
    """``@shared_task``'s keyword arguments as ``(options of @task, retry
    policy, bind, ignore_result, expires)``; raise ``InvalidTaskDefinition``
    naming the first option that is refused or wrong. ``expires`` is the
    default of every call (``apply_async()`` schedules with it)."""
    where = f"@shared_task on {fn_name}"
    for option in given:
        if option in REFUSED_TASK_OPTIONS:
            raise InvalidTaskDefinition(
                f"{where}: {option}= is not supported: {REFUSED_TASK_OPTIONS[option]}."
            )
        if option not in MAPPED_TASK_OPTIONS:
            raise InvalidTaskDefinition(
                f"{where}: unknown option {option}=; the options django-delayq "
                f"maps are {', '.join(sorted(MAPPED_TASK_OPTIONS))} (see "
                f"'Moving from Celery' in the documentation, docs/guide/celery.md)."
            )
    if given.get("acks_late") is False:
        raise InvalidTaskDefinition(
            f"{where}: acks_late=False is not supported: a task is always "
            f"acknowledged after its outcome is committed (acks_late=True); "
            f"remove acks_late=False."
        )
    max_retries = given.get("max_retries", CELERY_MAX_RETRIES)
    if max_retries is not None and (
        not isinstance(max_retries, int)
        or isinstance(max_retries, bool)
        or not 0 <= max_retries < MAX_ATTEMPTS_LIMIT
    ):
        raise InvalidTaskDefinition(
            f"{where}: max_retries must be None or an integer from 0 to "
            f"{MAX_ATTEMPTS_LIMIT - 1}; got {max_retries!r}."
        )
    policy = RetryPolicy(
        max_retries=max_retries,
        default_retry_delay=_seconds(
            given.get("default_retry_delay", CELERY_RETRY_DELAY),
            f"{where}: default_retry_delay",
        ),
        autoretry_for=_exceptions(
            given.get("autoretry_for", ()), where, "autoretry_for"
        ),
        dont_autoretry_for=_exceptions(
            given.get("dont_autoretry_for", ()), where, "dont_autoretry_for"
        ),
        retry_backoff=_backoff(given.get("retry_backoff", False), where),
        retry_backoff_max=_seconds(
            given.get("retry_backoff_max", CELERY_BACKOFF_MAX),
            f"{where}: retry_backoff_max",
        ),
        retry_jitter=bool(given.get("retry_jitter", True)),
        retry_kwargs=_retry_kwargs(given.get("retry_kwargs", {}), where),
    )
    options: dict[str, Any] = {
        "name": given.get("name"),
        "queue": given.get("queue"),
        # Enough attempts for self.retry() and the automatic retries alike.
        "max_attempts": max_attempts_of(
            _most(max_retries, policy.retry_kwargs.get("max_retries", max_retries))
        ),
        "atomic": given.get("atomic", True),
        "time_limit": _time_limit(given, where),
        "rate_limit": _rate_limit(given.get("rate_limit")),
    }
    if given.get("priority") is not None:
        options["priority"] = given["priority"]
    return (
        options,
        policy,
        bool(given.get("bind")),
        bool(given.get("ignore_result")),
        _expires(given.get("expires"), where),
    )


def refused_call_option(option: str, task_name: str) -> InvalidArgument:
    """The error for an ``apply_async()`` option that is not mapped."""
    where = f"{task_name}.apply_async()"
    if option in REFUSED_CALL_OPTIONS:
        return InvalidArgument(
            f"{where}: {option}= is not supported: {REFUSED_CALL_OPTIONS[option]}."
        )
    return InvalidArgument(
        f"{where}: unknown option {option}=; it takes args, kwargs, "
        f"{', '.join(sorted(CALL_OPTIONS))}."
    )


def _expires(value: Any, where: str) -> float | datetime.timedelta | None:
    """A task's default expiry: seconds (or a timedelta) from each call."""
    if value is None:
        return None
    expires: float | datetime.timedelta
    if isinstance(value, datetime.timedelta):
        expires, seconds = value, value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        expires, seconds = value, float(value)
    else:
        # A datetime too: as every call's default, it would refuse every
        # call made after it.
        raise InvalidTaskDefinition(
            f"{where}: expires must be a number of seconds or a timedelta, "
            f"counted from each call; got {value!r}. To give one call a "
            f"moment, pass it to apply_async(expires=...)."
        )
    if not 0 < seconds < float("inf"):
        raise InvalidTaskDefinition(
            f"{where}: expires must be more than 0 seconds (and finite); got {value!r}."
        )
    return expires


def _rate_limit(value: Any) -> Any:
    """Celery's int (or float) rate is tasks per second."""
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if is_number and value > 0 and float(value).is_integer():
        return f"{int(value)}/s"
    return value


def _most(*retries: int | None) -> int | None:
    return None if None in retries else max(r for r in retries if r is not None)


def _time_limit(given: Mapping[str, Any], where: str) -> float | None:
    """One limit: the soft one if given (it raises in the function, as
    django-delayq's does), else the hard one."""
    limits = [
        _seconds(given[name], f"{where}: {name}")
        for name in ("soft_time_limit", "time_limit")
        if given.get(name) is not None
    ]
    return min(limits) if limits else None


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise InvalidTaskDefinition(
            f"{where} must be a number of seconds (0 or more); got {value!r}."
        )
    return float(value)


def _backoff(value: Any, where: str) -> float:
    if value is True:
        return 1.0
    if value is False or value is None:
        return 0.0
    return _seconds(value, f"{where}: retry_backoff")


def _exceptions(value: Any, where: str, option: str) -> tuple[type[BaseException], ...]:
    items = value if isinstance(value, tuple | list) else (value,)
    if not all(
        isinstance(item, type) and issubclass(item, BaseException) for item in items
    ):
        raise InvalidTaskDefinition(
            f"{where}: {option} must be a tuple of exception classes, such as "
            f"(TimeoutError, ConnectionError); got {value!r}."
        )
    return tuple(items)


def _retry_kwargs(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidTaskDefinition(
            f"{where}: retry_kwargs must be a dict such as "
            f'{{"max_retries": 5, "countdown": 30}}; got {value!r}.'
        )
    unknown = sorted(set(value) - {"max_retries", "countdown"})
    if unknown:
        raise InvalidTaskDefinition(
            f"{where}: retry_kwargs takes max_retries and countdown; "
            f"{', '.join(unknown)} is not supported."
        )
    if "countdown" in value:
        _seconds(value["countdown"], f"{where}: retry_kwargs['countdown']")
    retries = value.get("max_retries")
    if (
        "max_retries" in value
        and retries is not None
        and (not isinstance(retries, int) or isinstance(retries, bool) or retries < 0)
    ):
        raise InvalidTaskDefinition(
            f"{where}: retry_kwargs['max_retries'] must be None or an integer "
            f"of 0 or more; got {retries!r}."
        )
    return dict(value)
