"""Periodic schedules defined in the database (:class:`RuntimeSchedule`):
created, edited, enabled and disabled in the admin while the project runs.

Each enabled, valid row becomes a :class:`~.ticks.Schedule` like those the
code declares, and the planner keeps both the same way: the same tick
keys, the same compare-and-set on ``PeriodicSchedule.planned_through``,
the same catch-up. What a row's ticks hold (task, arguments, queue,
priority) and when it ends (``expires_at``) are part of the schedule's
``definition``, so an edit replaces the ticks written ahead, as a deploy
that changes a code schedule does; a disabled or deleted row is retired as
a schedule the code no longer declares.

A row is checked field by field (:func:`validate`) with the helpers that
check ``DELAYQ["PERIODIC"]``, and its ticks' call as ``schedule()`` checks
it: a row the admin saved always plans. A row written around the checks,
or whose task a deploy removed, writes no ticks; the planner logs why.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError

from .. import registry
from ..api import check_call
from ..conf import get_settings
from ..exceptions import (
    DelayQueueException,
    InvalidArgument,
    InvalidTaskDefinition,
    UnknownQueue,
)
from ..models import RuntimeSchedule, write_db
from ..options import validate_priority
from .declared import _stored_arguments, declared
from .ticks import CatchUp, Schedule, check_definition, check_name

#: A cron expression that is valid, to check the other fields alone.
_ANY_CRON = "* * * * *"


@dataclass
class Found:
    """The runtime schedules, as the planner reads them in one round."""

    #: the enabled rows that pass the checks, as schedules
    schedules: list[Schedule] = field(default_factory=list)
    #: one message per enabled row left out
    problems: list[str] = field(default_factory=list)
    #: the names of the disabled rows
    disabled: set[str] = field(default_factory=set)


def code_names() -> set[str]:
    """The names of the schedules the code declares."""
    try:
        return {schedule.name for schedule in declared()[0]}
    except InvalidTaskDefinition:
        return set()  # DELAYQ["PERIODIC"] is not a dict: the checks say so


def validate(row: RuntimeSchedule, taken: Collection[str] | None = None) -> Schedule:
    """The schedule ``row`` defines.

    :param taken: the names of the schedules the code declares (read when
        not given); a runtime schedule may not have one of them.
    :raises ValidationError: a message per field at fault, as a form shows
        them (``NON_FIELD_ERRORS`` for neither or both of cron and every).
    """
    errors = _Errors()
    where = f"schedule {row.name!r}"
    errors.check("name", lambda: check_name(row.name, where))
    if row.name in (code_names() if taken is None else taken):
        errors.add(
            "name",
            f"{where}: a schedule declared in the code (@periodic or "
            f'DELAYQ["PERIODIC"]) has this name; choose another.',
        )
    registry.autodiscover()
    task = registry.all_tasks().get(row.task)
    if task is None:
        errors.add(
            "task",
            f"{where}: {row.task!r} is not a registered task; choose the name "
            f"of a @task or @periodic function.",
        )
    cron, every, zone = _check_when(row, where, errors)
    errors.check("args", lambda: _stored_arguments(row.args, {}, where))
    errors.check("kwargs", lambda: _stored_arguments([], row.kwargs, where))
    if row.queue:
        errors.check("queue", lambda: get_settings().queue(row.queue))
    if row.priority is not None:
        errors.check(
            "priority", lambda: validate_priority(row.priority, where="priority")
        )
    if errors or task is None:
        raise ValidationError(errors)
    try:
        args, kwargs = _stored_arguments(row.args, row.kwargs, where)
    except InvalidTaskDefinition as exc:  # too large together
        raise ValidationError({"args": [str(exc)]}) from None
    catch_up: CatchUp = row.catch_up  # type: ignore[assignment]  # checked above
    schedule = Schedule(
        name=row.name,
        task=task,
        cron=cron,
        every=None if every is None else datetime.timedelta(seconds=every),
        timezone=zone,
        catch_up=catch_up,
        args=tuple(args),
        kwargs=kwargs,
        queue=row.queue or None,
        priority=row.priority,
        expires=row.expires_at,
        revision=_revision(task.name, args, kwargs, row.queue, row.priority),
    )
    # The call its ticks make: the arguments bound to the function's
    # signature (with ``tick`` for a function that takes it), then all that
    # schedule() checks (the queue's limits, the task's own refusals).
    call = schedule.call(datetime.datetime.now(datetime.UTC))
    problem = task.argument_problem(list(call.args), dict(call.kwargs or {}))
    if problem is not None:
        tick = " (its ticks pass tick= themselves)" if schedule.takes_tick else ""
        raise ValidationError(
            {
                "args": [
                    f"{where}: its ticks cannot call {task.name}: {problem}. "
                    f"Set args and kwargs that fit it{tick}."
                ]
            }
        )
    try:
        check_call(call)
    except DelayQueueException as exc:
        at = "queue" if "queue" in str(exc) else NON_FIELD_ERRORS
        raise ValidationError({at: [f"{where}: {exc}"]}) from None
    return schedule


class _Errors(dict[str, list[str]]):
    """Field name -> its messages, as ``ValidationError`` takes them."""

    def add(self, field: str, message: str) -> None:
        self.setdefault(field, []).append(message)

    def check(self, field: str, call: Callable[[], object]) -> None:
        """Run ``call``; what it refuses is ``field``'s error."""
        try:
            call()
        except (InvalidTaskDefinition, InvalidArgument, UnknownQueue) as exc:
            self.add(field, str(exc))


def _check_when(
    row: RuntimeSchedule, where: str, errors: _Errors
) -> tuple[str | None, int | None, str | None]:
    """Check cron, every, the time zone and catch-up, each on its own (the
    checks of ``@periodic``); return ``(cron, every, zone)`` as given."""
    cron = row.cron.strip() or None
    every = row.every
    zone = row.time_zone.strip() or None
    if (cron is None) == (every is None):
        errors.add(
            NON_FIELD_ERRORS,
            f"{where} needs exactly one of cron (a cron expression, e.g. "
            f'"0 8 * * *") and every (a number of seconds); got '
            f"{'both' if cron else 'neither'}.",
        )
    if cron is not None:
        errors.check("cron", lambda: _when(where, cron=cron))
    if every is not None:
        errors.check("every", lambda: _when(where, every=every))
    if zone is not None:
        if cron is None:
            errors.add(
                "time_zone",
                f"{where}: a time zone applies to cron only; every ticks by "
                f"elapsed time. Leave it empty, or use cron for wall-clock times.",
            )
        else:
            errors.check("time_zone", lambda: _when(where, timezone=zone))
    errors.check("catch_up", lambda: _when(where, catch_up=row.catch_up))
    return cron, every, zone


def _when(
    where: str,
    *,
    cron: str | None = None,
    every: int | None = None,
    timezone: str | None = None,
    catch_up: str = "latest",
) -> None:
    """:func:`check_definition` of one field, the others valid."""
    if every is None and cron is None:
        cron = _ANY_CRON
    check_definition(
        where=where, cron=cron, every=every, timezone=timezone, catch_up=catch_up
    )


def _revision(
    task: str,
    args: list[object],
    kwargs: dict[str, object],
    queue: str,
    priority: int | None,
) -> str:
    """What a tick's row holds besides its time, in a few characters of
    the definition: equal for equal rows, different after an edit."""
    text = json.dumps(
        [task, args, kwargs, queue, priority], sort_keys=True, default=repr
    )
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def found(taken: Collection[str] | None = None) -> Found:
    """The runtime schedules to plan now, read from the database the
    schedules' rows live in (never a replica, which may lag)."""
    taken = code_names() if taken is None else taken
    result = Found()
    for row in RuntimeSchedule.objects.using(write_db()).order_by("name"):
        if not row.enabled:
            result.disabled.add(row.name)
            continue
        try:
            result.schedules.append(validate(row, taken))
        except ValidationError as exc:
            messages = "; ".join(
                message
                for field_messages in exc.message_dict.values()
                for message in field_messages
            )
            result.problems.append(f"runtime schedule {row.name!r}: {messages}")
    return result


def every_schedule() -> dict[str, Schedule]:
    """Every schedule planned: those the code declares and the enabled
    runtime ones, by name."""
    try:
        schedules = declared()[0]
    except InvalidTaskDefinition:
        schedules = []
    taken = {schedule.name for schedule in schedules}
    runtime = found(taken).schedules
    return {schedule.name: schedule for schedule in [*schedules, *runtime]}
