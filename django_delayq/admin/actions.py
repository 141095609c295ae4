"""Cancel, run now and retry, from the task list or a task's page.

Each action calls the public API (:func:`~django_delayq.cancel`,
:func:`~django_delayq.reschedule` with ``delay=0``,
:func:`~django_delayq.retry`) once per task, so the row is written with the
same fenced UPDATE as in code, and Redis follows after the commit. Each
needs its own permission, and each shows a confirmation page listing the
tasks before it acts (a POST with CSRF, like Django's delete confirmation).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.text import Truncator, capfirst
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..models import DelayedTask, write_db
from . import display
from .task_actions import CANCEL, RETRY, RUN_NOW, Result, TaskAction

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

#: The most tasks one request acts on; the rest wait for the next request.
ACTION_LIMIT = 1000
#: The most tasks a confirmation page lists.
LISTED = 100
#: The most refusals reported one by one.
REPORTED = 5
#: The ``delayq_tasks`` action that applies an admin action to any number
#: of tasks, in batches, outside a request.
COMMANDS = {CANCEL.name: "cancel", RUN_NOW.name: "run-now", RETRY.name: "retry"}


def allowed(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, action: TaskAction
) -> bool:
    check: Callable[[HttpRequest], bool] = getattr(
        model_admin, f"has_{action.permission}_permission"
    )
    return check(request)


def confirm_or_perform(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[DelayedTask],
    action: TaskAction,
    *,
    task: DelayedTask | None = None,
) -> HttpResponse | None:
    """Show the confirmation page, or act once it is confirmed.

    ``task`` is set when the action comes from that task's page: the page
    then posts back to the task's own URL, and the answer redirects there.
    Returns None after acting on the list (Django redirects to the list).
    """
    if not allowed(model_admin, request, action):
        raise PermissionDenied
    if request.method == "POST" and request.POST.get("post") == "yes":
        perform(model_admin, request, queryset, action)
        if task is None:
            return None
        return HttpResponseRedirect(
            reverse(
                "admin:django_delayq_delayedtask_change",
                args=[task.pk],
                current_app=model_admin.admin_site.name,
            )
        )
    return _confirmation(model_admin, request, queryset, action, task)


def perform(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[DelayedTask],
    action: TaskAction,
) -> None:
    """Apply ``action`` to the tasks it applies to, and report the outcome."""
    total = queryset.count()
    applicable = queryset.filter(status__in=action.applies_to)
    candidates = applicable.count()
    task_ids = list(
        applicable.order_by("pk").values_list("pk", flat=True)[:ACTION_LIMIT]
    )
    results: dict[Result, list[uuid.UUID]] = {result: [] for result in Result}
    refusals = []
    for task_id in task_ids:
        result, reason = action.apply(task_id)
        results[result].append(task_id)
        if reason:
            refusals.append(reason)
    done = results[Result.DONE]
    skipped = total - candidates + len(results[Result.SKIPPED])
    text = action.done(len(done))
    if skipped:
        text += "; " + action.skipped(skipped)
    model_admin.message_user(
        request, text + ".", messages.SUCCESS if done else messages.WARNING
    )
    for reason in refusals[:REPORTED]:
        model_admin.message_user(request, reason, messages.ERROR)
    if len(refusals) > REPORTED:
        model_admin.message_user(
            request,
            ngettext(
                "%(count)d more task was refused for the same reason.",
                "%(count)d more tasks were refused for the same reason.",
                len(refusals) - REPORTED,
            )
            % {"count": len(refusals) - REPORTED},
            messages.ERROR,
        )
    left = candidates - len(task_ids)
    if left > 0:
        model_admin.message_user(
            request,
            ngettext(
                "%(left)d more selected task was not handled: an action "
                "handles at most %(limit)d tasks at a time. Run it again for "
                "the rest, or run manage.py delayq_tasks %(command)s with "
                "filters for all of them at once.",
                "%(left)d more selected tasks were not handled: an action "
                "handles at most %(limit)d tasks at a time. Run it again for "
                "the rest, or run manage.py delayq_tasks %(command)s with "
                "filters for all of them at once.",
                left,
            )
            % {"left": left, "limit": ACTION_LIMIT, "command": COMMANDS[action.name]},
            messages.WARNING,
        )
    if done:
        _log(request, done, action)


def _log(request: HttpRequest, done: list[uuid.UUID], action: TaskAction) -> None:
    """Record who did what in the admin's history of each task."""
    user_id = request.user.pk
    if user_id is not None:  # always, behind the admin's login
        rows = list(
            # Just written: read where they were written, not from a replica.
            DelayedTask.objects.using(write_db())
            .filter(pk__in=done)
            .only("id", "name", "status")
        )
        LogEntry.objects.log_actions(
            user_id=user_id,
            queryset=rows,
            action_flag=CHANGE,
            change_message=str(action.logged),
        )
    logger.info(
        "admin: %s applied %s to %d task(s)", request.user, action.name, len(done)
    )


def _confirmation(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[DelayedTask],
    action: TaskAction,
    task: DelayedTask | None,
) -> TemplateResponse:
    now = timezone.now()
    total = queryset.count()
    candidates = queryset.filter(status__in=action.applies_to).count()
    # In the list's own order (an index order by default, not a sort of
    # everything selected).
    listed = list(queryset[:LISTED])
    site = model_admin.admin_site.name
    rows = [
        {
            "task": row,
            "url": reverse(
                "admin:django_delayq_delayedtask_change",
                args=[row.pk],
                current_app=site,
            ),
            "status": capfirst(row.get_status_display()),
            "run_at": display.timestamp(row.run_at),
            "timing": display.timing(row, now),
            "applies": row.status in action.applies_to,
        }
        for row in listed
    ]
    if task is not None:
        back = reverse(
            "admin:django_delayq_delayedtask_change", args=[task.pk], current_app=site
        )
    else:
        back = request.get_full_path()
    summary = action.applies(candidates) if candidates else str(action.applies_to_none)
    others = total - candidates
    left_alone = ngettext(
        "The other one is left alone.",
        "The other %(count)d are left alone.",
        others,
    ) % {"count": others}
    over_limit = _(
        "Only the first %(limit)d are handled now: an action handles at most "
        "%(limit)d tasks at a time. Run it again for the rest, or run "
        "manage.py delayq_tasks %(command)s with filters for all of them at "
        "once."
    ) % {"limit": ACTION_LIMIT, "command": COMMANDS[action.name]}
    context = {
        **model_admin.admin_site.each_context(request),
        "title": action.title,
        "subtitle": None,
        "opts": model_admin.opts,
        "app_label": model_admin.opts.app_label,
        "action": action,
        "task": task,
        "rows": rows,
        "total": total,
        "candidates": candidates,
        "summary": summary,
        "left_alone": left_alone if others else "",
        "over_limit": over_limit if candidates > ACTION_LIMIT else "",
        "unlisted": total - len(listed),
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "back_url": back,
        **display.breadcrumbs(
            model_admin.opts,
            site,
            *(
                [
                    (
                        reverse(
                            "admin:django_delayq_delayedtask_change",
                            args=[task.pk],
                            current_app=site,
                        ),
                        Truncator(str(task)).words(18),
                    )
                ]
                if task is not None
                else []
            ),
            (None, action.title),
        ),
    }
    request.current_app = site
    return TemplateResponse(
        request, "admin/django_delayq/action_confirmation.html", context
    )


def _bulk(action: TaskAction) -> Callable[..., HttpResponse | None]:
    def run(
        model_admin: admin.ModelAdmin[Any],
        request: HttpRequest,
        queryset: QuerySet[DelayedTask],
    ) -> HttpResponse | None:
        return confirm_or_perform(model_admin, request, queryset, action)

    run.__name__ = action.name
    return admin.action(permissions=[action.permission], description=action.title)(run)


cancel_tasks = _bulk(CANCEL)
run_tasks_now = _bulk(RUN_NOW)
retry_tasks = _bulk(RETRY)
