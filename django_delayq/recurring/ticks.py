"""What a periodic schedule is: when it ticks, and the key of each tick.

Tick times are a pure function of the schedule's definition, never of when a
process computed them: every process that keeps the schedule agrees on them,
so a tick planned by one process is the same tick another would plan, and
its dedupe key (:func:`tick_key`) names it exactly.

A tick's key is ``periodic:<schedule name>@<UTC time>``, the time to the
microsecond, so that a schedule's keys sort as its ticks do. Its grammar is
here alone: :func:`tick_key` writes a key and :func:`parse_tick_key` reads
one; the ``*_sql`` functions write and read the same in a query.
"""

from __future__ import annotations

import datetime
import math
import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from cronsim import CronSim, CronSimError
from django.db.models import CharField, F, Value
from django.db.models.functions import Concat, StrIndex, Substr

from ..exceptions import InvalidTaskDefinition

if TYPE_CHECKING:
    from ..api import Call
    from ..registry import Task

CatchUp = Literal["none", "latest", "all"]
CATCH_UP_POLICIES: tuple[str, ...] = get_args(CatchUp)
DEFAULT_CATCH_UP: CatchUp = "latest"
#: With ``catch_up="all"``, at most this many missed ticks run (the latest).
MAX_CATCH_UP = 100
#: The shortest ``every=``.
MIN_EVERY = datetime.timedelta(seconds=1)
#: A tick's dedupe key is ``periodic:<name>@<UTC time>``: what it starts
#: with, and what ends the schedule's name (a name cannot hold one).
KEY_PREFIX = "periodic:"
TICK_SEPARATOR = "@"
#: A tick's time in its key.
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
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

    A schedule edited in the admin also names its ticks' ``queue`` and
    ``priority`` (None: the task's), may end at ``expires`` (no tick after
    it), and carries a ``revision`` of what its ticks' rows hold (task,
    arguments, queue, priority): all part of its :attr:`definition`, so
    that an edit of any of them replaces the ticks written ahead.
    """

    name: str
    task: Task[Any, Any]
    cron: str | None = None
    every: datetime.timedelta | None = None
    timezone: str | None = None
    catch_up: CatchUp = DEFAULT_CATCH_UP
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    expires: datetime.datetime | None = None
    revision: str = ""

    @property
    def definition(self) -> str:
        """When it ticks, in words; stored, so that a deploy (or an edit in
        the admin) that changes it is noticed."""
        if self.every is not None:
            words = f"every {self.every.total_seconds():g} s"
        else:
            words = f"cron {self.cron} {self.zone().key}"
        if self.expires is not None:
            words += f" until {tick_text(_utc(self.expires))}"
        if self.revision:
            words += f" [{self.revision}]"
        return words

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
        return tick_key(self.name, tick)

    def call(self, tick: datetime.datetime) -> Call:
        """The call that writes one tick as a task row: the schedule's
        arguments (and the tick's time, for a function that takes
        ``tick``), due at the tick, under the tick's key."""
        # Here, not at the top: a tasks module imports this module (through
        # @periodic) while the apps load, before api's models can be.
        from ..api import Call

        kwargs = dict(self.kwargs)
        if self.takes_tick:
            kwargs["tick"] = tick_text(tick)
        return Call(
            self.task,
            args=list(self.args),
            kwargs=kwargs,
            eta=tick,
            key=self.key(tick),
            queue=self.queue,
            priority=self.priority,
        )

    def ticks_after(
        self, start: datetime.datetime, end: datetime.datetime, limit: int
    ) -> list[datetime.datetime]:
        """The first ``limit`` ticks after ``start``, up to ``end`` included
        (and up to ``expires``), in UTC."""
        start, end = _utc(start), _utc(end)
        if self.expires is not None:
            end = min(end, _utc(self.expires))
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
        """The last ``count`` ticks at or before ``moment`` (and ``expires``),
        oldest first, in UTC."""
        moment = _utc(moment)
        if self.expires is not None:
            moment = min(moment, _utc(self.expires))
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
    return tick.astimezone(datetime.UTC).strftime(_TIME_FORMAT)


def parse_tick(text: str) -> datetime.datetime:
    """A time in the form :func:`tick_text` writes, aware, in UTC (also the
    ``tick`` argument a row passes to a periodic function).

    :raises ValueError: ``text`` is no such time.
    """
    return datetime.datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=datetime.UTC)


def tick_prefix(name: str) -> str:
    """What the keys of the ticks of schedule ``name`` start with."""
    return f"{KEY_PREFIX}{name}{TICK_SEPARATOR}"


def tick_key(name: str, due: datetime.datetime) -> str:
    """The dedupe key of schedule ``name``'s tick due at ``due``."""
    return f"{tick_prefix(name)}{tick_text(due)}"


def parse_tick_key(key: object) -> tuple[str, datetime.datetime] | None:
    """The schedule's name and the tick's time (aware, UTC) of a tick's
    key; None if ``key`` is no tick's key.

    A tick's key is exactly what :func:`tick_key` writes: the same tick
    written another way (its microseconds cut short, say) would be a second
    dedupe key for it, so such a key names no tick.
    """
    if not isinstance(key, str) or not key.startswith(KEY_PREFIX):
        return None
    name, separator, when = key.removeprefix(KEY_PREFIX).partition(TICK_SEPARATOR)
    if not name or not separator:
        return None
    try:
        due = parse_tick(when)
    except ValueError:
        return None
    if tick_text(due) != when:
        return None
    return name, due


def schedule_of_key(key: object) -> str | None:
    """The name of the schedule whose tick ``key`` is; None if ``key`` is
    no tick's key (:func:`parse_tick_key`)."""
    found = parse_tick_key(key)
    return None if found is None else found[0]


def tick_prefix_sql(name: Any) -> Concat:
    """:func:`tick_prefix` in a query, of the expression ``name`` (such as
    ``OuterRef("name")``)."""
    return Concat(
        Value(KEY_PREFIX), name, Value(TICK_SEPARATOR), output_field=CharField()
    )


def tick_key_sql(name: Any, due: datetime.datetime) -> Concat:
    """:func:`tick_key` in a query, of the expression ``name``."""
    return Concat(
        tick_prefix_sql(name), Value(tick_text(due)), output_field=CharField()
    )


def schedule_of_key_sql(field: str) -> Substr:
    """The schedule's name in the tick key in column ``field``, in a query:
    what lies between :data:`KEY_PREFIX` and the first
    :data:`TICK_SEPARATOR`.

    For rows already filtered to keys of that shape; unlike
    :func:`parse_tick_key`, it does not read the time.
    """
    start = len(KEY_PREFIX) + 1  # SQL strings count from 1
    return Substr(
        field, start, StrIndex(F(field), Value(TICK_SEPARATOR)) - Value(start)
    )


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
    if TICK_SEPARATOR in name:
        raise InvalidTaskDefinition(
            f"{where}: a schedule's name cannot contain {TICK_SEPARATOR!r} (its "
            f"ticks' keys use it); got {name!r}."
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
