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
from ..models import DelayedTask, read_db

#: The most task names the name filter lists.
MAX_NAMES = 200


class _ValueFilter(admin.SimpleListFilter):
    """Filter on one column by value; subclasses say which values to offer."""

    field = ""

    def names(self) -> list[str]:
        raise NotImplementedError

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        names = self.names()
        # A value that is no longer offered (a queue configured once, a name
        # past the cap) stays reachable while it is the selected one.
        selected = self.value()
        if selected and selected not in names:
            names.append(selected)
        return [(name, name) for name in names]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[Any]
    ) -> QuerySet[Any] | None:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value else queryset


class QueueFilter(_ValueFilter):
    title = _("queue")
    parameter_name = field = "queue"

    def names(self) -> list[str]:
        return list(get_settings().queues)


class TaskNameFilter(_ValueFilter):
    title = _("task name")
    parameter_name = field = "name"

    def names(self) -> list[str]:
        return list(
            DelayedTask.objects.using(read_db())
            .order_by("name")
            .values_list("name", flat=True)
            .distinct()[:MAX_NAMES]
        )
