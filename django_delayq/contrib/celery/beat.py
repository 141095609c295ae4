"""Celery beat's schedules as django-delayq's periodic schedules.

``crontab(...)`` takes Celery's arguments and is a cron expression;
:func:`from_beat_schedule` turns a ``CELERY_BEAT_SCHEDULE`` dict into
``DELAYQ["PERIODIC"]`` entries. Every tick of a periodic schedule then runs
once, planned by every dispatcher and sweeper together (see the periodic
guide), with no separate beat process.
"""

from __future__ import annotations

import datetime
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

from ...exceptions import InvalidTaskDefinition


class crontab:
    """Celery's ``crontab``: each field a cron field (``"*/15"``,
    ``"mon-fri"``, ``"1,15"``), an int, or a set or list of ints."""

    def __init__(
        self,
        minute: Any = "*",
        hour: Any = "*",
        day_of_week: Any = "*",
        day_of_month: Any = "*",
        month_of_year: Any = "*",
        **unsupported: Any,
    ) -> None:
        if unsupported:
            raise InvalidTaskDefinition(
                f"crontab() takes minute, hour, day_of_week, day_of_month and "
                f"month_of_year; {', '.join(sorted(unsupported))} is not "
                f"supported (the time zone is the schedule's timezone=, or "
                f"settings.TIME_ZONE)."
            )
        fields = {
            "minute": minute,
            "hour": hour,
            "day_of_month": day_of_month,
            "month_of_year": month_of_year,
            "day_of_week": day_of_week,
        }
        self.fields = {name: _field(name, value) for name, value in fields.items()}
        if "*" not in (self.fields["day_of_month"], self.fields["day_of_week"]):
            # Celery runs when both days match; cron when either does.
            raise InvalidTaskDefinition(
                f"crontab(day_of_month={day_of_month!r}, day_of_week="
                f"{day_of_week!r}) is not supported: Celery runs it when both "
                f"days match, a cron expression when either does. Keep one of "
                f"the two, and check the other in the task."
            )

    @property
    def cron(self) -> str:
        """The cron expression (minute hour day month weekday)."""
        return " ".join(self.fields.values())

    def __repr__(self) -> str:
        return f"<crontab: {self.cron}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, crontab) and other.cron == self.cron

    def __hash__(self) -> int:
        return hash(self.cron)


def _field(name: str, value: Any) -> str:
    if isinstance(value, bool):
        pass
    elif isinstance(value, int):
        return str(value)
    elif isinstance(value, str) and value.strip() and " " not in value.strip():
        return value.strip()
    elif isinstance(value, Iterable) and not isinstance(value, str | bytes):
        items = list(value)
        if items and all(isinstance(i, int) and not isinstance(i, bool) for i in items):
            return ",".join(str(i) for i in sorted(set(items)))
    raise InvalidTaskDefinition(
        f"crontab({name}=...) must be a cron field such as '*/15' or 'mon-fri', "
        f"an int, or a set of ints; got {value!r}."
    )


#: The ``options`` of a beat entry that map to a periodic schedule's.
_OPTIONS = ("queue", "priority")


def from_beat_schedule(beat_schedule: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``CELERY_BEAT_SCHEDULE`` as ``DELAYQ["PERIODIC"]`` entries.

    Each entry's ``task`` keeps its name (a ``@shared_task``'s name is
    Celery's, ``module.function``); ``schedule`` is a :class:`crontab`
    (``cron=``), a ``timedelta`` or a number of seconds (``every=``);
    ``args``, ``kwargs`` and the ``queue`` and ``priority`` options are
    kept (for a task, they must be set on ``@shared_task``: reading an entry
    that sets them for a registered task raises an error saying so).
    ``options={"expires": ...}`` becomes ``catch_up="none"``: ticks missed
    while nothing ran are skipped (a tick that is only late still runs).
    Anything else raises
    :class:`~django_delayq.exceptions.InvalidTaskDefinition` naming the
    entry and the key.
    """
    if not isinstance(beat_schedule, Mapping):
        raise InvalidTaskDefinition(
            f"from_beat_schedule() takes the CELERY_BEAT_SCHEDULE dict; got "
            f"{type(beat_schedule).__name__}."
        )
    return {
        name: _entry(name, entry, f"CELERY_BEAT_SCHEDULE[{name!r}]")
        for name, entry in beat_schedule.items()
    }


def _entry(name: str, entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise InvalidTaskDefinition(
            f"{where} must be a dict with task and schedule; got {entry!r}."
        )
    unknown = sorted(
        set(entry) - {"task", "schedule", "args", "kwargs", "options", "relative"}
    )
    if unknown:
        raise InvalidTaskDefinition(
            f"{where}: {', '.join(unknown)} is not a key of a beat entry "
            f"django-delayq reads (task, schedule, args, kwargs, options)."
        )
    if entry.get("relative"):
        raise InvalidTaskDefinition(
            f"{where}: relative=True is not supported: an every= schedule ticks "
            f"from a fixed origin; drop relative."
        )
    mapped: dict[str, Any] = {"task": entry.get("task")}
    mapped.update(_when(entry.get("schedule"), where))
    if "args" in entry:
        mapped["args"] = list(entry["args"])
    if "kwargs" in entry:
        mapped["kwargs"] = dict(entry["kwargs"])
    options = entry.get("options") or {}
    if not isinstance(options, Mapping):
        raise InvalidTaskDefinition(
            f"{where}: options must be a dict; got {options!r}."
        )
    for option, value in options.items():
        if option in _OPTIONS:
            mapped[option] = value
        elif option == "expires":
            mapped["catch_up"] = "none"
        else:
            raise InvalidTaskDefinition(
                f"{where}: options[{option!r}] is not supported; a periodic "
                f"schedule takes queue and priority (expires becomes "
                f'catch_up="none").'
            )
    return mapped


def _when(schedule: Any, where: str) -> dict[str, Any]:
    if isinstance(schedule, crontab):
        return {"cron": schedule.cron}
    if isinstance(schedule, datetime.timedelta):
        return {"every": schedule}
    if isinstance(schedule, numbers.Real) and not isinstance(schedule, bool):
        return {"every": datetime.timedelta(seconds=float(schedule))}
    kind = type(schedule).__name__
    if kind == "crontab":  # Celery's own: read its fields as written
        fields = [
            getattr(schedule, f"_orig_{field}", None)
            for field in (
                "minute",
                "hour",
                "day_of_week",
                "day_of_month",
                "month_of_year",
            )
        ]
        if all(field is not None for field in fields):
            return {"cron": crontab(*fields).cron}
    if kind == "schedule" and isinstance(
        getattr(schedule, "run_every", None), datetime.timedelta
    ):
        return {"every": schedule.run_every}
    raise InvalidTaskDefinition(
        f"{where}: schedule {schedule!r} is not supported; use crontab(...) from "
        f"django_delayq.contrib.celery, a timedelta or a number of seconds "
        f"(solar schedules have no equivalent)."
    )
