"""The Django admin of django-delayq.

Registers :class:`~django_delayq.admin.tasks.DelayedTaskAdmin` (the task
list, each task's page, the cancel / run now / retry actions and the
dashboard), :class:`~django_delayq.admin.outbox.OutboxEntryAdmin`,
:class:`~django_delayq.admin.periodic.PeriodicScheduleAdmin` and
:class:`~django_delayq.admin.periodic.RuntimeScheduleAdmin` on the default
admin site. All but the last are read only: rows change through the public
API. The last edits the periodic schedules defined in the database, which
are definitions, not rows of work.

The site's index links to the dashboard too, through an index template that
extends the admin's own, unless the site already has an ``index_template``.
"""

from __future__ import annotations

from django.contrib import admin

from ..models import DelayedTask, OutboxEntry, PeriodicSchedule, RuntimeSchedule
from .outbox import OutboxEntryAdmin
from .periodic import PeriodicScheduleAdmin, RuntimeScheduleAdmin
from .tasks import DelayedTaskAdmin

__all__ = [
    "DelayedTaskAdmin",
    "OutboxEntryAdmin",
    "PeriodicScheduleAdmin",
    "RuntimeScheduleAdmin",
]

admin.site.register(DelayedTask, DelayedTaskAdmin)
admin.site.register(OutboxEntry, OutboxEntryAdmin)
admin.site.register(PeriodicSchedule, PeriodicScheduleAdmin)
admin.site.register(RuntimeSchedule, RuntimeScheduleAdmin)
if admin.site.index_template is None:
    admin.site.index_template = "admin/django_delayq/index.html"
