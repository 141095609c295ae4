"""Sidebar filters of the task list, cheap on large tables.

Django's default filter for a plain field lists its distinct values with a
scan of the whole table; the queue filter lists the configured queues
instead, and the task name filter reads the distinct names from the
``(name, status)`` index, capped.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from ..conf import get_settings
from ..models import DelayedTask

#: The most task names the name filter lists.
MAX_NAMES = 200


class QueueFilter(admin.SimpleListFilter):
    title = _("queue")
    parameter_name = "queue"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        names = list(get_settings().queues)
        # A queue that was configured once may still have rows; keep it
        # reachable while it is the selected one.
        selected = self.value()
        if selected and selected not in names:
            names.append(selected)
        return [(name, name) for name in names]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[Any]
    ) -> QuerySet[Any] | None:
        value = self.value()
        return queryset.filter(queue=value) if value else queryset


class TaskNameFilter(admin.SimpleListFilter):
    title = _("task name")
    parameter_name = "name"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        names = list(
            DelayedTask.objects.order_by("name")
            .values_list("name", flat=True)
            .distinct()[:MAX_NAMES]
        )
        selected = self.value()
        if selected and selected not in names:
            names.append(selected)
        return [(name, name) for name in names]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[Any]
    ) -> QuerySet[Any] | None:
        value = self.value()
        return queryset.filter(name=value) if value else queryset
