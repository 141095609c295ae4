"""Turning ``delay`` / ``eta`` into a ``run_at``, ``expires`` into an
``expires_at``, and both into Redis scores and text."""

from __future__ import annotations

import datetime
import math
from typing import Any

from django.conf import settings
from django.utils import timezone

from .exceptions import InvalidSchedule
from .text import short_repr

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)
#: Far enough for any real delay, and far from datetime's overflow.
MAX_DELAY = datetime.timedelta(days=365 * 100)
#: The earliest ``eta`` accepted. A past ``eta`` means "as soon as possible"
#: and is kept as given; one before this is no moment anyone meant but a
#: value standing in for a missing one (a timestamp of 0, ``datetime.min``),
#: and would read as a task decades late.
EARLIEST_ETA = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)


def lateness(
    run_at: datetime.datetime,
    created_at: datetime.datetime,
    started: datetime.datetime,
) -> float:
    """Seconds from when a task was due to ``started``, when its attempt
    started: the lateness the metrics, the logs and the admin report.

    Due at its ``run_at``, or when it was scheduled if that was later: an
    ``eta`` in the past asks for "as soon as possible", so a task scheduled
    with one is late only by the time the queue took, not by the age of its
    ``eta`` (an eta of a week ago would otherwise read as a week late).
    Never negative (a task never starts early): a clock step between two
    hosts' readings must not make it so.
    """
    due = max(run_at, created_at)
    return max((started - due).total_seconds(), 0.0)


def resolve_run_at(
    delay: Any, eta: Any, *, now: datetime.datetime | None = None
) -> datetime.datetime:
    """Return when a task should run, from at most one of ``delay`` and ``eta``.

    An ``eta`` is kept as given, to the microsecond: it is the caller's
    moment, and reads back as such (a Tasks result's ``run_after``). A
    ``delay``, or now, is rounded *up* to a whole millisecond, the unit of
    Redis scores. Either way :func:`to_score` rounds up, so Redis never hands
    a task out before its ``run_at``.
    """
    if delay is not None and eta is not None:
        raise InvalidSchedule(
            "Pass either delay= (seconds from now) or eta= (a datetime), not both."
        )
    now = timezone.now() if now is None else now
    if eta is not None:
        return _check_eta(eta, now)
    if delay is not None:
        return ceil_ms(now + _check_delay(delay))
    return ceil_ms(now)


def _check_delay(delay: Any) -> datetime.timedelta:
    if isinstance(delay, datetime.timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        try:
            seconds = float(delay)
        except OverflowError:  # an int too large for a float: 10**400
            seconds = math.inf if delay > 0 else -math.inf
    else:
        raise InvalidSchedule(
            f"delay= must be a number of seconds (int or float) or a "
            f"datetime.timedelta, not {type(delay).__name__} ({delay!r})."
        )
    if math.isnan(seconds) or (math.isinf(seconds) and isinstance(delay, float)):
        raise InvalidSchedule(
            f"delay= must be a finite number of seconds; got {delay!r}."
        )
    if seconds < 0:
        raise InvalidSchedule(
            f"delay= cannot be negative (got {short_repr(delay)}); use delay=0 to run "
            f"as soon as possible."
        )
    if seconds > MAX_DELAY.total_seconds():
        raise InvalidSchedule(
            f"delay= of {short_repr(delay)} is more than 100 years; pass a sensible "
            f"delay or an eta= datetime."
        )
    return datetime.timedelta(seconds=seconds)


def _check_eta(eta: Any, now: datetime.datetime) -> datetime.datetime:
    if not isinstance(eta, datetime.datetime):
        raise InvalidSchedule(
            f"eta= must be a datetime.datetime, not {type(eta).__name__} "
            f"({eta!r}); for a number of seconds from now use delay=."
        )
    run_at = _check_moment(eta, "eta=")
    if run_at - now > MAX_DELAY:
        raise InvalidSchedule(
            f"eta= {run_at.isoformat()} is more than 100 years from now; pass a "
            f"sensible date."
        )
    earliest = EARLIEST_ETA if settings.USE_TZ else timezone.make_naive(EARLIEST_ETA)
    if run_at < earliest:
        raise InvalidSchedule(
            f"eta= (a Django task's run_after) {run_at.isoformat()} is before "
            f"{EARLIEST_ETA.date()}: a "
            f"placeholder for a missing time (a timestamp of 0?), not a moment "
            f"to run at. An eta in the past runs the task as soon as possible; "
            f"to mean that, pass neither eta= nor delay=, or pass the real time."
        )
    return run_at


def resolve_expires_at(
    expires: Any, run_at: datetime.datetime, *, now: datetime.datetime
) -> datetime.datetime | None:
    """Return when a task due at ``run_at`` expires, from ``expires``; None
    for never.

    As Celery's ``expires``: a number of seconds or a ``timedelta`` counts
    from ``now`` (the call), not from the due time; a ``datetime`` is the
    moment itself, kept as given. An expiry at or before the moment the
    task is due (``run_at``, or now for a past ``eta``) could never let it
    run, and is refused.
    """
    if expires is None:
        return None
    if isinstance(expires, datetime.datetime):
        expires_at = _check_moment(expires, "expires=")
    elif isinstance(expires, datetime.timedelta) or (
        isinstance(expires, int | float) and not isinstance(expires, bool)
    ):
        expires_at = now + _check_expiry_span(expires)
    else:
        raise InvalidSchedule(
            f"expires= must be a number of seconds from now (int or float), a "
            f"datetime.timedelta, or an aware datetime.datetime; got "
            f"{type(expires).__name__} ({short_repr(expires)})."
        )
    if expires_at - now > MAX_DELAY:
        raise InvalidSchedule(
            f"expires= {short_repr(expires)} is more than 100 years from now; "
            f"pass a sensible expiry, or none."
        )
    due = max(run_at, now)
    if expires_at <= due:
        relative = ""
        if not isinstance(expires, datetime.datetime):
            relative = " (counted from now, the call, not from when it is due)"
        raise InvalidSchedule(
            f"expires= {short_repr(expires)} makes the task expire at "
            f"{expires_at.isoformat()}{relative}, not after it is due at "
            f"{due.isoformat()}: it could never run. Pass an expiry later than "
            f"the task's delay= or eta=, or no expires=."
        )
    return expires_at


def _check_expiry_span(expires: float | datetime.timedelta) -> datetime.timedelta:
    if isinstance(expires, datetime.timedelta):
        seconds = expires.total_seconds()
    else:
        try:
            seconds = float(expires)
        except OverflowError:  # an int too large for a float: 10**400
            seconds = math.inf if expires > 0 else -math.inf
    if math.isnan(seconds) or (math.isinf(seconds) and isinstance(expires, float)):
        raise InvalidSchedule(
            f"expires= must be a finite number of seconds; got {expires!r}."
        )
    if seconds <= 0:
        raise InvalidSchedule(
            f"expires= must be more than 0 seconds from now (got "
            f"{short_repr(expires)}): a task that has expired when it is "
            f"scheduled can never run. Pass a positive number, or no expires=."
        )
    if seconds > MAX_DELAY.total_seconds():
        raise InvalidSchedule(
            f"expires= of {short_repr(expires)} is more than 100 years; pass a "
            f"sensible expiry, or none."
        )
    return datetime.timedelta(seconds=seconds)


def moment_text(value: datetime.datetime) -> str:
    """``'2026-11-29 10:00:00 UTC'`` (with milliseconds if it has any), for
    text a row keeps; a naive moment (``USE_TZ = False``) without a zone."""
    if timezone.is_aware(value):
        value = value.astimezone(datetime.UTC)
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond // 1000:03d}"
    return f"{text} UTC" if timezone.is_aware(value) else text


def _check_moment(value: datetime.datetime, where: str) -> datetime.datetime:
    """``value`` as Django stores it; a naive one with ``USE_TZ`` refused."""
    if settings.USE_TZ and timezone.is_naive(value):
        name = where.rstrip("=")
        raise InvalidSchedule(
            f"{where} must be timezone-aware when USE_TZ = True; got the naive "
            f"{value.isoformat()}. Use django.utils.timezone.make_aware({name}) "
            f"or pass tzinfo=datetime.UTC."
        )
    if not settings.USE_TZ and timezone.is_aware(value):
        # With USE_TZ = False Django stores naive local times.
        return timezone.make_naive(value)
    return value


def ceil_ms(value: datetime.datetime) -> datetime.datetime:
    remainder = value.microsecond % 1000
    if remainder:
        value += datetime.timedelta(microseconds=1000 - remainder)
    return value


def to_score(run_at: datetime.datetime) -> int:
    """Return ``run_at`` as integer epoch milliseconds (the due-set score),
    rounded up: a task is never dispatched before its ``run_at``."""
    if timezone.is_naive(run_at):
        run_at = timezone.make_aware(run_at)
    return -((_EPOCH - run_at) // _MS)
