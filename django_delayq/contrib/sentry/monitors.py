"""Periodic schedules as Sentry Cron Monitors.

A tick of a monitored schedule checks in ``in_progress`` when its attempt
starts (``task_started``), then ``ok`` when it succeeds, or ``error`` when
the attempt fails (``task_retried``, ``task_failed``), with the attempt's
duration. The closing check-in names the opening one by the id Sentry
returned, kept here per task while the attempt runs: both signals are sent
in the worker process that ran the attempt. A failure recorded elsewhere (a
dead worker's task failed by the supervisor or the sweeper) checks in
``error`` on its own.

Each check-in carries the monitor's configuration, read from the schedule,
so that Sentry creates and updates the monitor by itself. The schedules
(those the code declares, and those edited in the admin, which live in the
database) are looked up at most once per :data:`SCHEDULES_TTL` per process.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from typing import TYPE_CHECKING, Any, Literal

from django.db import transaction
from django.utils import timezone
from sentry_sdk.crons import capture_checkin

from ...models import write_db
from ...recurring.runtime import every_schedule
from ...recurring.ticks import parse_tick_key
from ...worker.attempts import time_limit_of
from .options import active

if TYPE_CHECKING:
    from sentry_sdk._types import MonitorConfig

    from ...models import DelayedTask
    from ...recurring.ticks import Schedule

logger = logging.getLogger(__name__)

IntervalUnit = Literal["day", "hour", "minute"]

#: Seconds the schedules looked up stay in use.
SCHEDULES_TTL = 60.0
#: Minutes after a tick's time that Sentry waits for its check-in.
CHECKIN_MARGIN = 1
#: Sentry's longest monitor slug.
MAX_SLUG = 50
#: Open check-ins kept at most (a task whose end this process never sees,
#: say fenced by another worker, leaves one behind).
MAX_OPEN = 1000

_lock = threading.Lock()
_open: dict[Any, str] = {}  # task id -> id of its in_progress check-in
_schedules: dict[str, Schedule] = {}
_schedules_read = -math.inf  # time.monotonic() of the last look-up
_warned: set[str] = set()


def slug(name: str) -> str:
    """The monitor slug of schedule ``name``: lower case, each run of other
    characters than ``a-z``, ``0-9``, ``_`` and ``-`` made one ``-``, at most
    :data:`MAX_SLUG` characters."""
    text = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-")
    return text[:MAX_SLUG].rstrip("-") or "schedule"


def on_task_started(sender: Any, task: DelayedTask, **kwargs: Any) -> None:
    name = _monitored(task)
    if name is None:
        return
    check_in_id = capture_checkin(
        monitor_slug=slug(name),
        status="in_progress",
        monitor_config=monitor_config(name),
    )
    if check_in_id is None:
        return
    with _lock:
        _open[task.pk] = check_in_id
        while len(_open) > MAX_OPEN:
            del _open[next(iter(_open))]


def on_task_succeeded(sender: Any, task: DelayedTask, **kwargs: Any) -> None:
    _finish(task, "ok")


def on_task_ended_badly(sender: Any, task: DelayedTask, **kwargs: Any) -> None:
    """``task_retried`` and ``task_failed``: the attempt failed."""
    _finish(task, "error")


def _finish(row: DelayedTask, status: str) -> None:
    with _lock:
        check_in_id = _open.pop(row.pk, None)
    name = _monitored(row)
    if name is None:
        return
    capture_checkin(
        monitor_slug=slug(name),
        check_in_id=check_in_id,
        status=status,
        duration=_duration(row),
        monitor_config=monitor_config(name),
    )


def _monitored(row: DelayedTask) -> str | None:
    """The name of the monitored schedule ``row`` is a tick of; None if it
    is none, or Sentry is not initialised."""
    tick = parse_tick_key(row.key)
    if tick is None:
        return None
    options = active()
    if options is None or not options.monitors_schedule(tick[0]):
        return None
    return tick[0]


def _duration(row: DelayedTask) -> float | None:
    if row.started_at is None:
        return None
    end = row.finished_at or timezone.now()
    return max(0.0, (end - row.started_at).total_seconds())


def monitor_config(name: str) -> MonitorConfig | None:
    """The monitor's configuration, from schedule ``name``; None when the
    schedule is not found, or when Sentry cannot express when it ticks
    (a cron with seconds, an ``every=`` that is no whole number of
    minutes), which is logged once."""
    schedule = _schedule(name)
    if schedule is None:
        return None
    config: MonitorConfig
    if schedule.cron is not None:
        if len(schedule.cron.split()) != 5:
            _warn_once(name, f"cron={schedule.cron!r} has a seconds field")
            return None
        config = {
            "schedule": {"type": "crontab", "value": schedule.cron},
            "timezone": schedule.zone().key,
        }
    else:
        assert schedule.every is not None
        interval = _interval(schedule.every.total_seconds())
        if interval is None:
            _warn_once(name, f"every={schedule.every} is no whole number of minutes")
            return None
        value, unit = interval
        config = {"schedule": {"type": "interval", "value": value, "unit": unit}}
    config["checkin_margin"] = CHECKIN_MARGIN
    limit = time_limit_of(schedule.task)
    if limit:
        config["max_runtime"] = math.ceil(limit / 60)
    return config


def _interval(seconds: float) -> tuple[int, IntervalUnit] | None:
    units: tuple[tuple[IntervalUnit, int], ...] = (
        ("day", 86400),
        ("hour", 3600),
        ("minute", 60),
    )
    for unit, length in units:
        if seconds % length == 0:
            return int(seconds // length), unit
    return None


def _warn_once(name: str, why: str) -> None:
    with _lock:
        if name in _warned:
            return
        _warned.add(name)
    logger.warning(
        "periodic schedule %r: %s, which a Sentry cron monitor cannot express; "
        "its check-ins carry no monitor configuration: create the monitor "
        "%r in Sentry by hand",
        name,
        why,
        slug(name),
    )


def _schedule(name: str) -> Schedule | None:
    """Schedule ``name``, from a look-up at most :data:`SCHEDULES_TTL` old."""
    global _schedules, _schedules_read
    now = time.monotonic()
    with _lock:
        if now - _schedules_read < SCHEDULES_TTL:
            return _schedules.get(name)
    try:
        # In a savepoint: the signal may be sent inside a worker's group
        # transaction, which a failed read must not break.
        with transaction.atomic(using=write_db()):
            found = every_schedule()
    except Exception:
        logger.exception("could not read the periodic schedules for Sentry")
        found = {}
    with _lock:
        _schedules, _schedules_read = found, now
    return found.get(name)


def forget() -> None:
    """Forget what was looked up and warned about (for tests)."""
    global _schedules, _schedules_read
    with _lock:
        _open.clear()
        _schedules, _schedules_read = {}, -math.inf
        _warned.clear()
