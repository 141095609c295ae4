"""``@periodic`` and ``DELAYQ["PERIODIC"]``: the schedules a project declares.

Both give :class:`~.ticks.Schedule` objects; :func:`declared` is the one
list the planner, the system checks, the admin and ``delayq_status`` read.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from django.utils.module_loading import import_string

from .. import registry
from ..exceptions import InvalidPayload, InvalidTaskDefinition, TaskNotRegistered
from ..payload import check_payload
from ..text import short_repr
from .ticks import (
    DEFAULT_CATCH_UP,
    CatchUp,
    Schedule,
    check_arguments,
    check_definition,
    check_name,
    parse_tick,
    parse_tick_key,
    tick_text,
)

P = ParamSpec("P")
R = TypeVar("R")

_declared: dict[str, Schedule] = {}
_lock = threading.Lock()

#: The task options (see :class:`~django_delayq.options.TaskOptions`) a
#: ``DELAYQ["PERIODIC"]`` entry may set.
SETTING_TASK_OPTIONS = ("queue", "priority", "max_attempts")

#: The keys of one ``DELAYQ["PERIODIC"]`` entry.
SETTING_KEYS = frozenset(
    {
        "task",
        "cron",
        "every",
        "timezone",
        "catch_up",
        "args",
        "kwargs",
        *SETTING_TASK_OPTIONS,
    }
)


class PeriodicTask(registry.Task[P, R]):
    """The task of a ``@periodic`` function: a function with a parameter
    named ``tick`` receives the tick's scheduled time.

    The tick travels in the row's kwargs as text (rows hold JSON) and
    becomes an aware ``datetime`` here, as the function is called. Scheduled
    by hand without one, the function gets the time its run started.
    """

    def argument_problem(self, args: Any, kwargs: dict[str, Any]) -> str | None:
        if self._takes_tick and "tick" not in kwargs:
            kwargs = {**kwargs, "tick": None}
        return super().argument_problem(args, kwargs)

    def run(self, args: Any, kwargs: dict[str, Any], limit: float | None) -> Any:
        if self._takes_tick:
            tick = kwargs.get("tick")
            kwargs = {
                **kwargs,
                "tick": datetime.datetime.now(datetime.UTC)
                if tick is None
                else parse_tick(tick)
                if isinstance(tick, str)
                else tick,
            }
        return super().run(args, kwargs, limit)

    @property
    def _takes_tick(self) -> bool:
        signature = self.signature
        return signature is not None and "tick" in signature.parameters


class SettingTask(PeriodicTask[P, R]):
    """The task of a ``DELAYQ["PERIODIC"]`` entry whose function is no task
    of its own (``django.core.management.call_command``, say).

    Registered as an ordinary task, such a function could be run by any row
    naming it, with any arguments: a row asking ``call_command`` for
    ``shell -c`` would run any code on the workers. So it is named after its
    schedule and runs only as that schedule's ticks (a tick's key, the
    arguments the entry declares): :meth:`row_problem` refuses any other
    row, which ``schedule()`` then does not write and a worker fails without
    calling the function.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: schedule name -> its declared args and kwargs, as rows store them
        self.ticks_of: dict[str, str] = {}

    def allow(
        self, schedule: str, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> None:
        self.ticks_of[schedule] = _stored(args, kwargs)

    def row_problem(
        self, args: Sequence[Any], kwargs: dict[str, Any], key: str | None
    ) -> str | None:
        schedules = ", ".join(repr(name) for name in sorted(self.ticks_of))
        found = parse_tick_key(key)
        schedule = None if found is None else found[0]
        if schedule not in self.ticks_of:
            return (
                f"{self.name} runs only as the ticks of its periodic schedule "
                f'({schedules} in DELAYQ["PERIODIC"]), and key={short_repr(key)} '
                f"is not one of their keys. To run the function now, call it "
                f"in your code; to schedule it by hand, make it a @task"
            )
        if self._takes_tick:
            # The tick the key names, as the planner writes it: no other
            # time (or object) reaches the function through a forged row.
            assert found is not None
            when = tick_text(found[1])
            if kwargs.get("tick") != when:
                return (
                    f"{self.name} runs its tick {when} with kwargs tick={when!r}, "
                    f"the time its key names; this row has "
                    f"tick={short_repr(kwargs.get('tick'))}"
                )
            kwargs = {name: value for name, value in kwargs.items() if name != "tick"}
        if _stored(args, kwargs) != self.ticks_of[schedule]:
            declared_args, declared_kwargs = json.loads(self.ticks_of[schedule])
            return (
                f"{self.name} runs only with the arguments its "
                f'DELAYQ["PERIODIC"][{schedule!r}] entry declares '
                f"(args={short_repr(declared_args)}, "
                f"kwargs={short_repr(declared_kwargs)}); this row has "
                f"args={short_repr(args)}, kwargs={short_repr(kwargs)}"
            )
        return None


def _stored(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """Arguments as one text, equal for equal JSON (tuples are lists there)."""
    return json.dumps([list(args), dict(kwargs)], sort_keys=True, default=repr)


def periodic(
    *,
    cron: str | None = None,
    every: datetime.timedelta | None = None,
    timezone: str | None = None,
    catch_up: CatchUp = DEFAULT_CATCH_UP,
    name: str | None = None,
    queue: str | None = None,
    max_attempts: int | None = None,
    priority: int = 0,
    time_limit: float | None = None,
    atomic: bool = True,
    concurrency_limit: int | None = None,
    rate_limit: str | None = None,
    limit_by: str | Callable[..., Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Callable[[Callable[P, R]], PeriodicTask[P, R]]:
    """Run a function on a schedule: at the times of a ``cron`` expression,
    or ``every`` so often.

    The function becomes a task too (``@task`` options: ``name``,
    ``queue``, ``max_attempts``, ``priority``, ``time_limit``, ``atomic``,
    ``concurrency_limit``, ``rate_limit``, ``limit_by``, ``meta``: each tick
    is scheduled with that metadata),
    which can be scheduled by hand like any other. Each tick is a task row
    with the dedupe key ``periodic:<name>@<time>``, so it runs once however
    many processes keep the schedule.

    :param cron: 5 fields (minute hour day month weekday), or 6 with seconds
        first, in ``timezone``.
    :param every: a ``timedelta`` of at least one second; ticks fall on whole
        multiples of it since 1970-01-01 UTC.
    :param timezone: an IANA name for ``cron``; defaults to
        ``settings.TIME_ZONE``.
    :param catch_up: what happens to ticks missed while nothing kept the
        schedule (every process stopped): ``"none"`` skips them,
        ``"latest"`` (the default) runs the most recent once, ``"all"`` runs
        each of them, up to the latest 100.
    """
    where = "@periodic"
    cron, every = check_definition(
        where=where, cron=cron, every=every, timezone=timezone, catch_up=catch_up
    )

    def decorate(fn: Callable[P, R]) -> PeriodicTask[P, R]:
        if isinstance(fn, registry.Task):
            raise InvalidTaskDefinition(
                f"{fn.name} is already a task: use @periodic(...) instead of "
                f"@task, not both (it takes the same options)."
            )
        built = registry.build(
            fn,
            name=name,
            queue=queue,
            max_attempts=max_attempts,
            atomic=atomic,
            time_limit=time_limit,
            priority=priority,
            concurrency_limit=concurrency_limit,
            rate_limit=rate_limit,
            limit_by=limit_by,
            meta=meta,
            cls=PeriodicTask,
        )
        assert isinstance(built, PeriodicTask)
        schedule = Schedule(
            name=check_name(built.name, where),
            task=built,
            cron=cron,
            every=every,
            timezone=timezone,
            catch_up=catch_up,
        )
        _refuse_other_arguments(schedule, where)
        registry.register(built)
        with _lock:
            _declared[schedule.name] = schedule
        return built

    return decorate


def _refuse_other_arguments(schedule: Schedule, where: str) -> None:
    """A tick calls the function with the schedule's args and kwargs (and
    ``tick``): refuse a function that cannot be called so, now."""
    kwargs = dict(schedule.kwargs)
    if schedule.takes_tick:
        kwargs["tick"] = None
    problem = schedule.task.argument_problem(list(schedule.args), kwargs)
    if problem is not None:
        raise InvalidTaskDefinition(
            f"{where}: {schedule.task.name} cannot be called by its ticks: "
            f"{problem}. A periodic function takes no arguments, or only one "
            f"named tick (the tick's time)."
        )


def declared() -> tuple[list[Schedule], list[str]]:
    """Every schedule the project declares, and what is wrong with
    ``DELAYQ["PERIODIC"]`` (one message per bad entry, which is left out).

    Imports the installed apps' ``tasks`` modules first, where ``@periodic``
    functions live.
    """
    registry.autodiscover()
    with _lock:
        found = dict(_declared)
    problems: list[str] = []
    for entry_name, entry in _setting().items():
        try:
            schedule = _read(entry_name, entry)
        except (InvalidTaskDefinition, TaskNotRegistered, ImportError) as exc:
            problems.append(str(exc))
            continue
        if schedule.name in found:
            problems.append(
                f'DELAYQ["PERIODIC"][{entry_name!r}]: a @periodic function '
                f"already declares a schedule of this name; rename the entry."
            )
            continue
        found[schedule.name] = schedule
    return [found[name] for name in sorted(found)], problems


def _setting() -> Mapping[Any, Any]:
    from ..conf import raw_settings

    raw = raw_settings()
    periodic_setting = raw.get("PERIODIC") if isinstance(raw, Mapping) else None
    if periodic_setting is None:
        return {}
    if not isinstance(periodic_setting, Mapping):
        raise InvalidTaskDefinition(
            f'DELAYQ["PERIODIC"] must be a dict of schedule name to its '
            f"options, not {type(periodic_setting).__name__}."
        )
    return periodic_setting


def from_setting(entry_name: Any, entry: Any) -> Schedule:
    """One ``DELAYQ["PERIODIC"]`` entry as a :class:`Schedule`.

    ``task`` is a registered task's name, or the dotted path of any
    function (one you do not own, such as
    ``django.core.management.call_command``), which then becomes a
    :class:`SettingTask` named after the entry: it runs only as the entry's
    ticks, with the entry's arguments.
    """
    where = f'DELAYQ["PERIODIC"][{entry_name!r}]'
    check_name(entry_name, where)
    if not isinstance(entry, Mapping):
        raise InvalidTaskDefinition(
            f'{where} must be a dict such as {{"task": "shop.tasks.digest", '
            f'"cron": "0 8 * * *"}}; got {entry!r}.'
        )
    unknown = sorted(str(key) for key in set(entry) - SETTING_KEYS)
    if unknown:
        close = [
            f"{key} (did you mean {match[0]!r}?)"
            if (match := difflib.get_close_matches(key, SETTING_KEYS, n=1))
            else key
            for key in unknown
        ]
        raise InvalidTaskDefinition(
            f"{where} has unknown keys {', '.join(close)}; it takes "
            f"{', '.join(sorted(SETTING_KEYS))}."
        )
    task_name = entry.get("task")
    if not isinstance(task_name, str) or not task_name:
        raise InvalidTaskDefinition(
            f'{where} needs "task": a registered task\'s name or the dotted '
            f"path of a function; got {task_name!r}."
        )
    catch_up = entry.get("catch_up", DEFAULT_CATCH_UP)
    cron, every = check_definition(
        where=where,
        cron=entry.get("cron"),
        every=entry.get("every"),
        timezone=entry.get("timezone"),
        catch_up=catch_up,
    )
    args, kwargs = _stored_arguments(
        entry.get("args", ()), entry.get("kwargs", {}), where
    )
    options = {key: entry[key] for key in SETTING_TASK_OPTIONS if key in entry}
    task = _task_for_setting(entry_name, task_name, options, where)
    if isinstance(task, SettingTask):
        task.allow(entry_name, args, kwargs)
    schedule = Schedule(
        name=entry_name,
        task=task,
        cron=cron,
        every=every,
        timezone=entry.get("timezone"),
        catch_up=catch_up,
        args=tuple(args),
        kwargs=dict(kwargs),
    )
    _refuse_other_arguments(schedule, where)
    return schedule


def _stored_arguments(
    args: Any, kwargs: Any, where: str
) -> tuple[list[Any], dict[str, Any]]:
    """An entry's ``args`` and ``kwargs`` as its ticks' rows store them
    (JSON: ``1e16`` is stored as ``10000000000000000``), the form a tick's
    row is compared with; refused, naming the entry, if a row could not
    hold them."""
    check_arguments(args, kwargs, where)
    from ..conf import get_settings

    try:
        return check_payload(args, kwargs, max_bytes=get_settings().max_payload_bytes)
    except InvalidPayload as exc:
        raise InvalidTaskDefinition(f"{where}: {exc}") from None


def _task_for_setting(
    entry_name: str, task_name: str, options: Mapping[str, Any], where: str
) -> registry.Task[Any, Any]:
    # The registry itself, not registry.get(): its fallbacks include
    # task_from_setting, which comes back here.
    registry.autodiscover()
    tasks = registry.all_tasks()
    found = tasks.get(task_name)
    if found is not None:
        if options and not isinstance(found, PeriodicTask):
            raise InvalidTaskDefinition(
                f"{where}: {task_name} is a @task, which has its own "
                f"{', '.join(sorted(options))}; set them on @task, or remove "
                f"them here."
            )
        return found
    taken = tasks.get(entry_name)
    if taken is not None:
        raise InvalidTaskDefinition(
            f"{where}: the schedule runs a function of its own, so its task "
            f"takes the schedule's name, and {entry_name!r} is a registered "
            f"task's name already; rename the entry."
        )
    try:
        fn = import_string(task_name)
    except ImportError:
        raise InvalidTaskDefinition(
            f'{where}: "task" {task_name!r} is neither a registered task nor '
            f"an importable function; use a dotted path such as "
            f'"shop.tasks.send_digest".'
        ) from None
    built = registry.build(fn, name=entry_name, cls=SettingTask, **options)
    assert isinstance(built, SettingTask)
    return built


#: entry name -> (the entry it was read from, its schedule): an entry is
#: read again only when the setting changes (override_settings in tests).
_from_settings: dict[Any, tuple[Any, Schedule]] = {}


def task_from_setting(name: str) -> registry.Task[Any, Any] | None:
    """The task of the ``DELAYQ["PERIODIC"]`` entry named ``name``, for
    :func:`registry.get`: a function the entry names that is no task of its
    own runs under its schedule's name (see :class:`SettingTask`). None if
    no valid entry makes one. Never raises, as a registry fallback must not.

    The previous release registered such a function under its dotted path:
    the ticks it wrote name that path, and still run, as the ticks of the
    entries that name the function (with their arguments).
    """
    try:
        entries = _setting()
    except InvalidTaskDefinition:
        return None
    own = _setting_task(name, entries.get(name))
    if own is not None:
        return own
    earlier = [
        found
        for entry_name, entry in entries.items()
        if isinstance(entry, Mapping)
        and entry.get("task") == name
        and (found := _setting_task(entry_name, entry)) is not None
    ]
    if not earlier:
        return None
    # The options of the schedules' task, under the name the rows hold.
    options = dataclasses.replace(earlier[0].options, name=name)
    task: SettingTask[Any, Any] = SettingTask(earlier[0].func, **options.arguments())
    for found in earlier:
        task.ticks_of.update(found.ticks_of)
    return task


def _setting_task(entry_name: Any, entry: Any) -> SettingTask[Any, Any] | None:
    if not isinstance(entry, Mapping):
        return None
    try:
        task = _read(entry_name, entry).task
    except (InvalidTaskDefinition, TaskNotRegistered, ImportError):
        return None
    return task if isinstance(task, SettingTask) else None


def _read(entry_name: Any, entry: Any) -> Schedule:
    """:func:`from_setting`, read again only when the entry changes."""
    known = _from_settings.get(entry_name)
    if known is None or known[0] is not entry:
        known = _from_settings[entry_name] = (entry, from_setting(entry_name, entry))
    return known[1]


def forget(name: str) -> None:
    """Drop a ``@periodic`` schedule from this process (tests)."""
    with _lock:
        _declared.pop(name, None)
