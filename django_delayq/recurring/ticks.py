"""What a periodic schedule is: when it ticks, and the key of each tick.

Tick times are a pure function of the schedule's definition, never of when a
process computed them: every process that keeps the schedule agrees on them,
so a tick planned by one process is the same tick another would plan, and
its dedupe key (:meth:`Schedule.key`) names it exactly.
"""

from __future__ import annotations

import datetime
import math
import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from cronsim import CronSim, CronSimError

from ..exceptions import InvalidTaskDefinition

if TYPE_CHECKING:
    from ..registry import Task

CatchUp = Literal["none", "latest", "all"]
CATCH_UP_POLICIES: tuple[str, ...] = get_args(CatchUp)
DEFAULT_CATCH_UP: CatchUp = "latest"
#: With ``catch_up="all"``, at most this many missed ticks run (the latest).
MAX_CATCH_UP = 100
#: The shortest ``every=``.
MIN_EVERY = datetime.timedelta(seconds=1)
#: What a tick's dedupe key starts with: ``periodic:<name>@<UTC time>``.
KEY_PREFIX = "periodic:"
#: A tick's key holds the schedule's name and a 27-character time.
MAX_NAME_LENGTH = 160

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_SECOND = datetime.timedelta(seconds=1)


@dataclass(frozen=True)
class Schedule:
    """One periodic schedule: a task and when it ticks.

    Exactly one of ``cron`` and ``every``. ``every`` ticks fall on whole
    multiples of the period since 1970-01-01 UTC (every 5 minutes: at :00,
    :05...), so they do not depend on when a process started; ``cron`` ticks
    follow the expression in ``timezone`` (None: the project's
    ``TIME_ZONE``, read when the ticks are computed).
    """

    name: str
    task: Task[Any, Any]
    cron: str | None = None
    every: datetime.timedelta | None = None
    timezone: str | None = None
    catch_up: CatchUp = DEFAULT_CATCH_UP
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def definition(self) -> str:
        """When it ticks, in words; stored, so that a deploy that changes it
        is noticed."""
        if self.every is not None:
            return f"every {self.every.total_seconds():g} s"
        return f"cron {self.cron} {self.zone().key}"

    @property
    def takes_tick(self) -> bool:
        signature = self.task.signature
        return signature is not None and "tick" in signature.parameters

    def zone(self) -> zoneinfo.ZoneInfo:
        if self.timezone is not None:
            return zoneinfo.ZoneInfo(self.timezone)
        from django.conf import settings

        return zoneinfo.ZoneInfo(settings.TIME_ZONE or "UTC")

    def key(self, tick: datetime.datetime) -> str:
        """The dedupe key of one tick: at most one active row holds it."""
        return f"{KEY_PREFIX}{self.name}@{tick_text(tick)}"

    def ticks_after(
        self, start: datetime.datetime, end: datetime.datetime, limit: int
    ) -> list[datetime.datetime]:
        """The first ``limit`` ticks after ``start``, up to ``end`` included, in UTC."""
        start, end = _utc(start), _utc(end)
        if self.every is not None:
            period = _micros(self.every)
            first = _micros(start - _EPOCH) // period + 1
            last = _micros(end - _EPOCH) // period
            return [
                _EPOCH + datetime.timedelta(microseconds=n * period)
                for n in range(first, min(last, first + limit - 1) + 1)
            ]
        assert self.cron is not None
        found: list[datetime.datetime] = []
        for local in CronSim(self.cron, start.astimezone(self.zone())):
            tick = local.astimezone(datetime.UTC)
            if tick > end or len(found) >= limit:
                break
            if tick > start:
                found.append(tick)
        return found

    def ticks_until(
        self, moment: datetime.datetime, count: int
    ) -> list[datetime.datetime]:
        """The last ``count`` ticks at or before ``moment``, oldest first, in UTC."""
        moment = _utc(moment)
        if self.every is not None:
            period = _micros(self.every)
            last = _micros(moment - _EPOCH) // period
            return [
                _EPOCH + datetime.timedelta(microseconds=n * period)
                for n in range(last - count + 1, last + 1)
            ]
        assert self.cron is not None
        # CronSim in reverse yields ticks strictly before its start once it
        # has whole seconds: start one second past the moment's second.
        start = moment.replace(microsecond=0) + _SECOND
        found: list[datetime.datetime] = []
        for local in CronSim(self.cron, start.astimezone(self.zone()), reverse=True):
            tick = local.astimezone(datetime.UTC)
            if tick <= moment:
                found.append(tick)
            if len(found) >= count:
                break
        found.reverse()
        return found

    def next_tick(self, after: datetime.datetime) -> datetime.datetime | None:
        found = self.ticks_after(after, after + datetime.timedelta(days=400 * 8), 1)
        return found[0] if found else None


def tick_text(tick: datetime.datetime) -> str:
    """A tick's time as its key writes it: UTC, to the microsecond."""
    return tick.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_tick(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.UTC
    )


def schedule_of_key(key: object) -> str | None:
    """The name of the schedule whose tick ``key`` is; None if ``key`` is
    no tick's key (a name holds no ``@``, and the time parses)."""
    if not isinstance(key, str) or not key.startswith(KEY_PREFIX):
        return None
    name, at, when = key[len(KEY_PREFIX) :].partition("@")
    if not name or not at:
        return None
    try:
        parse_tick(when)
    except ValueError:
        return None
    return name


def _utc(value: datetime.datetime) -> datetime.datetime:
    """``value`` in UTC; a naive one is in the current time zone, as Django
    reads it with ``USE_TZ = False``."""
    if value.tzinfo is None:
        from django.utils import timezone

        value = timezone.make_aware(value)
    return value.astimezone(datetime.UTC)


def _micros(delta: datetime.timedelta) -> int:
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def check_definition(
    *,
    where: str,
    cron: Any,
    every: Any,
    timezone: Any,
    catch_up: Any,
) -> tuple[str | None, datetime.timedelta | None]:
    """Validate when a schedule ticks; return ``(cron, every)``.

    :raises InvalidTaskDefinition: naming the field and the fix.
    """
    if (cron is None) == (every is None):
        raise InvalidTaskDefinition(
            f"{where} needs exactly one of cron= (a cron expression, e.g. "
            f'"0 8 * * *") and every= (a datetime.timedelta, e.g. '
            f"timedelta(minutes=5)); got cron={cron!r}, every={every!r}."
        )
    if cron is not None:
        if not isinstance(cron, str) or len(cron.split()) not in (5, 6):
            raise InvalidTaskDefinition(
                f"{where}: cron= must be a cron expression of 5 fields (minute "
                f"hour day month weekday), or 6 with seconds first; got {cron!r}."
            )
        try:
            CronSim(cron, datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC))
        except (CronSimError, ValueError) as exc:
            raise InvalidTaskDefinition(
                f"{where}: cron={cron!r} is not a valid cron expression ({exc})."
            ) from None
        cron = " ".join(cron.split())
    if every is not None:
        given = every
        if isinstance(every, int | float) and not isinstance(every, bool):
            if not math.isfinite(every):
                every = None
            else:
                every = datetime.timedelta(seconds=every)
        if not isinstance(every, datetime.timedelta) or every < MIN_EVERY:
            raise InvalidTaskDefinition(
                f"{where}: every= must be a datetime.timedelta of at least "
                f"1 second (or a number of seconds); got {given!r}."
            )
    if timezone is not None:
        if not isinstance(timezone, str):
            raise InvalidTaskDefinition(
                f"{where}: timezone= must be an IANA time zone name such as "
                f'"Asia/Shanghai", or None for settings.TIME_ZONE; got {timezone!r}.'
            )
        try:
            zoneinfo.ZoneInfo(timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise InvalidTaskDefinition(
                f"{where}: timezone={timezone!r} is not a time zone this machine "
                f'knows; use an IANA name such as "Europe/Berlin" (install '
                f"the tzdata package where the system has none)."
            ) from None
        if every is not None:
            raise InvalidTaskDefinition(
                f"{where}: timezone= applies to cron= only; every= ticks by "
                f"elapsed time. Drop timezone=, or use cron= for wall-clock times."
            )
    if catch_up not in CATCH_UP_POLICIES:
        raise InvalidTaskDefinition(
            f'{where}: catch_up= must be "none", "latest" or "all"; got {catch_up!r}.'
        )
    return cron, every


def check_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_LENGTH:
        raise InvalidTaskDefinition(
            f"{where}: a schedule's name must be a non-empty string of at most "
            f"{MAX_NAME_LENGTH} characters; got {name!r}. Pass name=... to name it."
        )
    if "@" in name:
        raise InvalidTaskDefinition(
            f"{where}: a schedule's name cannot contain '@' (its ticks' keys "
            f"use it); got {name!r}."
        )
    return name


def check_arguments(
    schedule_args: Sequence[Any], schedule_kwargs: Mapping[str, Any], where: str
) -> None:
    if isinstance(schedule_args, str | bytes) or not isinstance(
        schedule_args, Sequence
    ):
        raise InvalidTaskDefinition(
            f"{where}: args must be a list; got {schedule_args!r}."
        )
    if not isinstance(schedule_kwargs, Mapping):
        raise InvalidTaskDefinition(
            f"{where}: kwargs must be a dict; got {schedule_kwargs!r}."
        )
