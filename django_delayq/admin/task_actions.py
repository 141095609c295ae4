"""What each task action is: the task status it applies to, the permission
it needs, the change of ``delayq_tasks`` it makes (one task at a time,
through the public API, see :mod:`django_delayq.management.bulk`), and its
words on the confirmation page and in messages.
:mod:`django_delayq.admin.actions` runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.utils.translation import gettext_lazy, ngettext

from ..models import Status

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise


@dataclass(frozen=True)
class TaskAction:
    name: str  # the admin action's name
    permission: str  # checked by ModelAdmin.has_<permission>_permission()
    applies_to: tuple[str, ...]  # the statuses a task needs for the action
    #: the ``delayq_tasks`` change it makes (a key of ``bulk.CHANGES``)
    change: str
    title: _StrPromise  # the action's description, the confirmation's title
    question: _StrPromise  # asked on the confirmation page
    button: _StrPromise  # the button on a task's page
    consequence: _StrPromise  # what happens to the tasks it applies to
    done: Callable[[int], str]
    skipped: Callable[[int], str]
    logged: _StrPromise  # the admin history's change message
    #: the confirmation's count of the tasks it applies to (at least one)
    applies: Callable[[int], str]
    #: the confirmation's words when it applies to none of them
    applies_to_none: _StrPromise


def _not_scheduled(count: int) -> str:
    return ngettext(
        "%(count)d was no longer scheduled and was left alone",
        "%(count)d were no longer scheduled and were left alone",
        count,
    ) % {"count": count}


def _finished(count: int) -> str:
    return ngettext(
        "%(count)d had finished and was left alone",
        "%(count)d had finished and were left alone",
        count,
    ) % {"count": count}


CANCEL = TaskAction(
    name="cancel_tasks",
    permission="cancel",
    applies_to=(Status.SCHEDULED, Status.RUNNING),
    title=gettext_lazy("Cancel selected delayed tasks"),
    question=gettext_lazy("Are you sure you want to cancel these tasks?"),
    button=gettext_lazy("Cancel task"),
    consequence=gettext_lazy(
        "Cancelled tasks never run; they are removed from Redis right away. "
        "A running task is stopped: at its next check if it checks, by force "
        "after the grace period otherwise, and its atomic writes are rolled "
        "back."
    ),
    change="cancel",
    done=lambda n: (
        ngettext("Cancelled %(count)d task", "Cancelled %(count)d tasks", n)
        % {"count": n}
    ),
    skipped=_finished,
    logged=gettext_lazy("Cancelled in the admin."),
    applies=lambda n: (
        ngettext(
            "%(count)d of the selected tasks is scheduled or running and will be "
            "cancelled.",
            "%(count)d of the selected tasks are scheduled or running and will be "
            "cancelled.",
            n,
        )
        % {"count": n}
    ),
    applies_to_none=gettext_lazy(
        "None of the selected tasks is scheduled or running, so this would "
        "change nothing."
    ),
)

RUN_NOW = TaskAction(
    name="run_tasks_now",
    permission="run",
    applies_to=(Status.SCHEDULED,),
    title=gettext_lazy("Run selected delayed tasks now"),
    question=gettext_lazy("Are you sure you want to run these tasks now?"),
    button=gettext_lazy("Run now"),
    consequence=gettext_lazy(
        "Their run time becomes now: a worker runs them as soon as one is free."
    ),
    change="run-now",
    done=lambda n: (
        ngettext("Set %(count)d task to run now", "Set %(count)d tasks to run now", n)
        % {"count": n}
    ),
    skipped=_not_scheduled,
    logged=gettext_lazy("Set to run now in the admin."),
    applies=lambda n: (
        ngettext(
            "%(count)d of the selected tasks is scheduled and will run now.",
            "%(count)d of the selected tasks are scheduled and will run now.",
            n,
        )
        % {"count": n}
    ),
    applies_to_none=gettext_lazy(
        "None of the selected tasks is scheduled, so this would change nothing."
    ),
)

RETRY = TaskAction(
    name="retry_tasks",
    permission="retry",
    applies_to=(Status.FAILED,),
    title=gettext_lazy("Retry selected failed tasks"),
    question=gettext_lazy("Are you sure you want to retry these tasks?"),
    button=gettext_lazy("Retry"),
    consequence=gettext_lazy(
        "They are scheduled again to run now, with their attempts back at 0. "
        "A task whose dedupe key another active task holds now is not retried."
    ),
    change="retry",
    done=lambda n: (
        ngettext("Retried %(count)d failed task", "Retried %(count)d failed tasks", n)
        % {"count": n}
    ),
    skipped=lambda n: (
        ngettext(
            "%(count)d had not failed and was left alone",
            "%(count)d had not failed and were left alone",
            n,
        )
        % {"count": n}
    ),
    logged=gettext_lazy("Retried in the admin."),
    applies=lambda n: (
        ngettext(
            "%(count)d of the selected tasks has failed and will be retried.",
            "%(count)d of the selected tasks have failed and will be retried.",
            n,
        )
        % {"count": n}
    ),
    applies_to_none=gettext_lazy(
        "None of the selected tasks has failed, so this would change nothing."
    ),
)

ACTIONS = (CANCEL, RUN_NOW, RETRY)
