"""Cancel, run now and retry, from the task list or a task's page.

Each action first shows a confirmation page (a POST with CSRF, like
Django's delete confirmation): how many tasks are selected and how many the
action applies to, the list's filters in force, and a sample of the tasks.
The selection may be a few rows or, with the list's "Select all", every
task the filters match, however many: once confirmed, the action runs
through ``delayq_tasks``'s machinery (:mod:`django_delayq.management.bulk`),
which reads the ids a batch at a time after the last one seen and changes
each task through the public API (:func:`~django_delayq.cancel`,
:func:`~django_delayq.reschedule` with ``delay=0``,
:func:`~django_delayq.retry`) in a transaction of its own. So 100,000 tasks
are never in memory at once, no lock is held longer than one task's
change, and Redis follows each commit as for a call in code. Each action
needs its own permission.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.views.main import (
    ERROR_FLAG,
    IGNORED_PARAMS,
    PAGE_VAR,
    SEARCH_VAR,
)
from django.core.exceptions import FieldDoesNotExist, PermissionDenied
from django.db.models import Field, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.text import Truncator, capfirst
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..management import bulk
from ..models import DelayedTask, write_db
from . import display
from .task_actions import CANCEL, RETRY, RUN_NOW, TaskAction

logger = logging.getLogger(__name__)

#: The tasks a confirmation page lists, as a sample of the selection.
SAMPLE = bulk.SAMPLE_SIZE
#: The most refusals reported one by one.
REPORTED = 5


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
    Returns None after acting on the list (Django redirects to the list,
    its filters kept).
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
    """Apply ``action`` to the tasks it applies to, in batches, and report
    the outcome."""
    total = queryset.count()
    applicable = queryset.filter(status__in=action.applies_to)
    candidates = applicable.count()
    change = bulk.CHANGES[action.change]
    done: list[uuid.UUID] = []  # this batch's, logged at its end
    refusals: list[str] = []  # the first few; the rest are counted

    def recorded(task_id: uuid.UUID) -> tuple[bulk.Outcome, str]:
        outcome, reason = change.apply(task_id)
        if outcome is bulk.Outcome.DONE:
            done.append(task_id)
        return outcome, reason

    def recorded_batch(
        ids: list[uuid.UUID],
    ) -> dict[uuid.UUID, tuple[bulk.Outcome, str]]:
        assert change.apply_batch is not None
        outcomes = change.apply_batch(ids)
        done.extend(i for i in ids if outcomes[i][0] is bulk.Outcome.DONE)
        return outcomes

    def report(task_id: uuid.UUID, outcome: bulk.Outcome, reason: str) -> None:
        if outcome is bulk.Outcome.FAILED and len(refusals) < REPORTED:
            refusals.append(
                reason if str(task_id) in reason else f"Task {task_id}: {reason}"
            )

    def batch_done(tally: bulk.Tally) -> None:
        _log(request, done, action)
        done.clear()

    tally = bulk.apply_change(
        dataclasses.replace(
            change,
            apply=recorded,
            apply_batch=recorded_batch if change.apply_batch else None,
        ),
        applicable,
        bulk.BATCH_SIZE,
        report,
        batch_done,
    )
    # Those in another state from the start, and those that left the state
    # the action needs before their turn came (a worker started one).
    # (A task that entered that state meanwhile was changed too: not below 0.)
    skipped = max(0, total - candidates) + tally.skipped
    text = action.done(tally.done)
    if skipped:
        text += "; " + action.skipped(skipped)
    model_admin.message_user(
        request, text + ".", messages.SUCCESS if tally.done else messages.WARNING
    )
    for reason in refusals:
        model_admin.message_user(request, reason, messages.ERROR)
    if tally.failed > len(refusals):
        model_admin.message_user(
            request,
            ngettext(
                "%(count)d more task was refused too.",
                "%(count)d more tasks were refused too.",
                tally.failed - len(refusals),
            )
            % {"count": tally.failed - len(refusals)},
            messages.ERROR,
        )
    logger.info(
        "admin: %s applied %s to %d task(s) (%d skipped, %d refused)",
        request.user,
        action.name,
        tally.done,
        skipped,
        tally.failed,
    )


def _log(request: HttpRequest, done: list[uuid.UUID], action: TaskAction) -> None:
    """Record who did what in the admin's history of each task."""
    user_id = request.user.pk
    if done and user_id is not None:  # always logged in, behind the admin
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
    # everything selected); the payloads are not needed.
    listed = list(queryset.defer(*display.HEAVY_FIELDS)[:SAMPLE])
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
        # The list as it was: its filters, search and page (a GET, so
        # going back changes nothing).
        back = request.get_full_path()
    summary = action.applies(candidates) if candidates else str(action.applies_to_none)
    others = total - candidates
    left_alone = ngettext(
        "The other one is left alone.",
        "The other %(count)d are left alone.",
        others,
    ) % {"count": others}
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
        "unlisted": total - len(listed),
        "filters": _filters_in_force(model_admin, request) if task is None else [],
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
        # Posted back to the list with its query string, so that the
        # confirmed action acts on the same filtered set.
        "form_url": request.get_full_path(),
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


def _filters_in_force(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest
) -> list[tuple[str, str]]:
    """The list's filters, search and dates in the query string, as
    (what, value) pairs: what "Select all" selected."""
    opts = model_admin.opts
    titles: dict[str, str] = {}
    choices: dict[str, dict[str, str]] = {}
    for entry in model_admin.list_filter:
        if isinstance(entry, str):
            try:
                field = opts.get_field(entry)
            except FieldDoesNotExist:
                continue
            if not isinstance(field, Field):
                continue  # a relation's reverse side: the model has none
            titles[entry] = capfirst(str(field.verbose_name))
            choices[entry] = {
                str(value): capfirst(str(label)) for value, label in field.flatchoices
            }
        elif isinstance(entry, type) and hasattr(entry, "parameter_name"):
            titles[entry.parameter_name] = capfirst(str(entry.title))
    hierarchy = model_admin.date_hierarchy or ""
    shown: list[tuple[str, str]] = []
    dates: dict[str, str] = {}
    for param, values in request.GET.lists():
        value = ", ".join(values)
        if not value:
            continue
        if param == SEARCH_VAR:
            shown.append((_("Search"), value))
        elif param in IGNORED_PARAMS or param in (PAGE_VAR, ERROR_FLAG):
            continue  # the order, the page, a popup: not a filter
        elif hierarchy and param.startswith(f"{hierarchy}__"):
            dates[param.removeprefix(f"{hierarchy}__")] = value
        else:
            name = param.split("__", 1)[0]
            label = titles.get(param) or titles.get(name) or param
            shown.append((label, choices.get(name, {}).get(value, value)))
    if dates:
        parts = [dates.get("year", "")]
        parts += [dates[part].zfill(2) for part in ("month", "day") if part in dates]
        dated = opts.get_field(hierarchy)
        title = dated.verbose_name if isinstance(dated, Field) else hierarchy
        shown.append((capfirst(str(title)), "-".join(parts)))
    return shown


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
