"""The Django admin of django-delayq.

Registers :class:`~django_delayq.admin.tasks.DelayedTaskAdmin` (the task
list, each task's page, the cancel / run now / retry actions and the
dashboard), :class:`~django_delayq.admin.outbox.OutboxEntryAdmin` and
:class:`~django_delayq.admin.periodic.PeriodicScheduleAdmin` on the default
admin site. All are read only: rows change through the public API.

The site's index links to the dashboard too, through an index template that
extends the admin's own, unless the site already has an ``index_template``.
"""

from __future__ import annotations

from django.contrib import admin

from ..models import DelayedTask, OutboxEntry, PeriodicSchedule
from .outbox import OutboxEntryAdmin
from .periodic import PeriodicScheduleAdmin
from .tasks import DelayedTaskAdmin

__all__ = ["DelayedTaskAdmin", "OutboxEntryAdmin", "PeriodicScheduleAdmin"]

admin.site.register(DelayedTask, DelayedTaskAdmin)
admin.site.register(OutboxEntry, OutboxEntryAdmin)
admin.site.register(PeriodicSchedule, PeriodicScheduleAdmin)
if admin.site.index_template is None:
    admin.site.index_template = "admin/django_delayq/index.html"
