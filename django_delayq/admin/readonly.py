"""The base of django-delayq's admins: pages that show rows and never edit them.

Rows change only through the API (``cancel()``, ``retry()``...) or the loops,
so the admin adds, edits and deletes nothing: the actions it offers are the
API's, each behind a permission of its own (``<verb>_<model>``, see
docs/guide/admin.md). The read-only fields are the fields shown, taken from
``fieldsets`` (or ``fields``) so that they are written once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    # ModelAdmin is generic for type checkers only.
    _ModelAdmin = admin.ModelAdmin


class ReadOnlyAdmin(_ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A deleted task row or outbox entry is work that silently never
        # happens: never from the admin.
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if self.fieldsets:
            shown = [
                name for _title, options in self.fieldsets for name in options["fields"]
            ]
        else:
            shown = list(self.fields or ())
        # A field may be a tuple of fields shown on one line.
        return [
            name
            for entry in shown
            for name in ((entry,) if isinstance(entry, str) else entry)
        ]

    def has_verb_permission(self, request: HttpRequest, verb: str) -> bool:
        """The user's ``<app>.<verb>_<model>`` permission (``cancel``,
        ``replay``...), which each action checks."""
        opts = self.opts
        return bool(request.user.has_perm(f"{opts.app_label}.{verb}_{opts.model_name}"))
