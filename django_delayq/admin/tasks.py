"""The admin of :class:`~django_delayq.models.DelayedTask`: list, detail, actions.

Read only: rows change through the public API only (the actions), never
through a form. Adding is left to ``schedule()``, and deleting is not
offered: a deleted scheduled row would leave its id in Redis until the
sweeper noticed, and a finished one is pruned after its retention anyway.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _

from ..models import DelayedTask
from ..text import clipped
from . import dashboard, display
from .actions import (
    allowed,
    cancel_tasks,
    confirm_or_perform,
    retry_tasks,
    run_tasks_now,
)
from .filters import QueueFilter, TaskNameFilter
from .readonly import ReadOnlyAdmin
from .task_actions import ACTIONS, CANCEL, RETRY, RUN_NOW, TaskAction

#: The last part of each action's URL name (and its permission's verb).
_URL_VERBS = {CANCEL.name: "cancel", RUN_NOW.name: "run", RETRY.name: "retry"}


class _TaskChangeList(ChangeList):
    def get_queryset(
        self, request: HttpRequest, exclude_parameters: Any = None
    ) -> QuerySet[Any]:
        return (
            super()
            .get_queryset(request, exclude_parameters)
            .defer(*display.HEAVY_FIELDS)
        )


class DelayedTaskAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "queue",
        "priority",
        "status_label",
        # The run time and how it relates to now in one column: with the
        # admin's side bar and filters open, seven columns clipped the last
        # ones (attempts, the dedupe key) on a 1,400 px wide screen.
        "run_at_label",
        "attempts_label",
        "key",
    )
    list_display_links = ("name",)
    list_filter = ("status", QueueFilter, TaskNameFilter)
    # Shown as the search box; get_search_results() does the searching.
    search_fields = ("id", "key", "name")
    search_help_text = _(
        "A task id (the full UUID), the start of a dedupe key, or part of a task name."
    )
    date_hierarchy = "run_at"
    # Newest first: UUIDv7 ids grow with time, and the primary key index
    # serves this order without sorting the table.
    ordering = ("-id",)
    # The model has no relations, so a page is one query whatever its size.
    list_select_related = False
    # Skip the second COUNT(*) of the whole table on every filtered page, and
    # the per-choice counts.
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    actions = (cancel_tasks, run_tasks_now, retry_tasks)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "name",
                    "queue",
                    "priority",
                    "key",
                    "status_label",
                    "attempts_label",
                )
            },
        ),
        (_("Timeline"), {"fields": ("timeline",)}),
        (_("Arguments"), {"fields": ("args_json", "kwargs_json", "meta_json")}),
        (
            _("Outcome"),
            {"fields": ("result_json", "error", "traceback")},
        ),
        (
            _("Worker bookkeeping"),
            {
                "fields": ("shard", "claim_entry", "workers"),
                "classes": ("collapse",),
            },
        ),
    )
    # -- permissions (the actions'; see ReadOnlyAdmin) ---------------------

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return self.has_verb_permission(request, "cancel")

    def has_run_permission(self, request: HttpRequest) -> bool:
        return self.has_verb_permission(request, "run")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return self.has_verb_permission(request, "retry")

    # -- list ---------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _TaskChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[DelayedTask], search_term: str
    ) -> tuple[QuerySet[DelayedTask], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            task_id = uuid.UUID(term)
        except ValueError:
            pass
        else:
            # An id is an exact primary key lookup, however big the table.
            return queryset.filter(pk=task_id), False
        return queryset.filter(Q(key__startswith=term) | Q(name__icontains=term)), False

    @admin.display(description=_("status"), ordering="status")
    def status_label(self, task: DelayedTask) -> SafeString:
        return format_html(
            '<span class="delayq-status delayq-status-{}">{}</span>',
            task.status,
            capfirst(task.get_status_display()),
        )

    @admin.display(description=_("run at"), ordering="run_at")
    def run_at_label(self, task: DelayedTask) -> SafeString:
        return format_html(
            '{}<br><span class="delayq-quiet">{}</span>',
            display.timestamp(task.run_at),
            display.timing(task, timezone.now()),
        )

    @admin.display(description=_("attempts"))
    def attempts_label(self, task: DelayedTask) -> str:
        return display.attempts(task)

    # -- detail -------------------------------------------------------------

    @admin.display(description=_("events"))
    def timeline(self, task: DelayedTask) -> SafeString:
        return display.timeline_html(task, timezone.now())

    @admin.display(description=_("positional arguments"))
    def args_json(self, task: DelayedTask) -> SafeString:
        return display.pretty_json(task.args)

    @admin.display(description=_("keyword arguments"))
    def kwargs_json(self, task: DelayedTask) -> SafeString:
        return display.pretty_json(task.kwargs)

    @admin.display(description=_("metadata"))
    def meta_json(self, task: DelayedTask) -> SafeString:
        # NULL is "no metadata", shown as what the task's runs see: {}.
        return display.pretty_json(task.meta or {})

    @admin.display(description=_("return value"))
    def result_json(self, task: DelayedTask) -> SafeString | str:
        if task.result is None:
            return self.get_empty_value_display()
        return display.pretty_json(task.result)

    @admin.display(description=_("workers"))
    def workers(self, task: DelayedTask) -> str:
        """One line per attempt claimed, oldest first."""
        return "\n".join(str(worker) for worker in task.worker_ids) or "-"

    @admin.display(description=_("last error"))
    def error(self, task: DelayedTask) -> str:
        return clipped(task.last_error, display.MAX_SHOWN_CHARS)

    @admin.display(description=_("last traceback"))
    def traceback(self, task: DelayedTask) -> SafeString | str:
        return display.preformatted(task.last_traceback)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        task = self.get_object(request, unquote(object_id))
        if task is not None:
            context["delayq_buttons"] = [
                {
                    "label": action.button,
                    "url": self._action_url(action, task),
                    "name": action.name,
                }
                for action in ACTIONS
                if task.status in action.applies_to and allowed(self, request, action)
            ]
        return super().change_view(request, object_id, form_url, context)

    def _action_url(self, action: TaskAction, task: DelayedTask) -> str:
        verb = _URL_VERBS[action.name]
        opts = self.opts
        return reverse(
            f"admin:{opts.app_label}_{opts.model_name}_{verb}",
            args=[task.pk],
            current_app=self.admin_site.name,
        )

    # -- extra pages ----------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        urls = [
            path(
                "dashboard/",
                wrap(self.dashboard_view),
                name="django_delayq_dashboard",
            ),
            path(
                "dashboard/queues/",
                wrap(self.queue_view),
                name="django_delayq_dashboard_queue",
            ),
            path(
                "<path:object_id>/cancel/",
                wrap(self.cancel_view),
                name=f"{prefix}_cancel",
            ),
            path(
                "<path:object_id>/run-now/",
                wrap(self.run_now_view),
                name=f"{prefix}_run",
            ),
            path(
                "<path:object_id>/retry/",
                wrap(self.retry_view),
                name=f"{prefix}_retry",
            ),
        ]
        return urls + super().get_urls()

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        return dashboard.render(self, request)

    def queue_view(self, request: HttpRequest) -> HttpResponse:
        return dashboard.pause_or_resume(self, request)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._task_action(request, object_id, CANCEL)

    def run_now_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._task_action(request, object_id, RUN_NOW)

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._task_action(request, object_id, RETRY)

    def _task_action(
        self, request: HttpRequest, object_id: str, action: TaskAction
    ) -> HttpResponse:
        """One task's action: its confirmation page (GET), then the act (POST)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        task = self.get_object(request, unquote(object_id))
        if task is None:
            raise Http404(f"No delayed task has the id {object_id!r}.")
        queryset = self.get_queryset(request).filter(pk=task.pk)
        response = confirm_or_perform(self, request, queryset, action, task=task)
        assert response is not None  # always an answer for a single task
        return response
