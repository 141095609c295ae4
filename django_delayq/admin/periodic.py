"""The admin of :class:`~django_delayq.models.PeriodicSchedule`: the
schedules with their next and last ticks, and Pause / Resume.

Read only, like the other pages: a schedule is declared in the code or in
``DELAYQ["PERIODIC"]``, and only its pause is the operator's. Pause and
resume call :func:`~django_delayq.recurring.planner.pause` and
:func:`~django_delayq.recurring.planner.resume`, behind the permission
``django_delayq.pause_periodicschedule``.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.views.main import ChangeList
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from ..models import DelayedTask, PeriodicSchedule, Status, read_db, write_db
from ..recurring import Schedule
from ..recurring.overview import ScheduleState, late_ticks, state_of
from ..recurring.planner import pause, resume
from ..recurring.ticks import (
    parse_tick_key,
    tick_key_sql,
    tick_prefix,
    tick_prefix_sql,
)
from . import display
from .readonly import ReadOnlyAdmin

logger = logging.getLogger(__name__)

_STATE_LABELS = {
    "active": gettext_lazy("active"),
    "paused": gettext_lazy("paused"),
    "removed": gettext_lazy("removed from the code"),
}


@dataclass(frozen=True)
class _Shown:
    """What a row's columns show beyond the row itself."""

    #: The schedule as this process's code declares it; None: not declared.
    schedule: Schedule | None
    state: ScheduleState
    now: datetime.datetime


class _ScheduleChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # One read of the declarations and of the late ticks for the page,
        # not one per row and column.
        now = timezone.now()
        schedules = _declared()
        late = late_ticks(now, read_db())
        for row in self.result_list:
            row._delayq_shown = _Shown(
                schedules.get(row.name), state_of(row, late), now
            )


def _declared() -> dict[str, Schedule]:
    from ..exceptions import InvalidTaskDefinition
    from ..recurring import declared

    try:
        return {schedule.name: schedule for schedule in declared()[0]}
    except InvalidTaskDefinition:
        return {}  # DELAYQ["PERIODIC"] is not a dict: the checks say so


def _shown(row: PeriodicSchedule) -> _Shown:
    shown: _Shown | None = getattr(row, "_delayq_shown", None)
    if shown is None:  # a schedule's own page
        now = timezone.now()
        shown = _Shown(
            _declared().get(row.name), state_of(row, late_ticks(now, read_db())), now
        )
        row._delayq_shown = shown  # type: ignore[attr-defined]
    return shown


def _act(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[PeriodicSchedule],
    pausing: bool,
) -> None:
    changed: list[PeriodicSchedule] = []
    cancelled = 0
    for row in queryset.order_by("name"):
        try:
            if pausing:
                # From the primary: the read that decides, next to the write.
                before = (
                    PeriodicSchedule.objects.using(write_db()).get(pk=row.pk).paused
                )
                cancelled += pause(row.name)
                if not before:
                    changed.append(row)
            elif resume(row.name):
                changed.append(row)
        except PeriodicSchedule.DoesNotExist:
            continue  # gone meanwhile (a test database flushed, say)
    unchanged = queryset.count() - len(changed)
    if pausing:
        text = ngettext(
            "Paused %(count)d schedule: it writes no ticks until it is resumed",
            "Paused %(count)d schedules: they write no ticks until they are resumed",
            len(changed),
        ) % {"count": len(changed)}
        text += ngettext(
            " (%(count)d tick not yet due was cancelled).",
            " (%(count)d ticks not yet due were cancelled).",
            cancelled,
        ) % {"count": cancelled}
        if unchanged:
            text += " " + ngettext(
                "%(count)d was paused already.",
                "%(count)d were paused already.",
                unchanged,
            ) % {"count": unchanged}
    else:
        text = ngettext(
            "Resumed %(count)d schedule from its next tick; the ticks that fell "
            "in the pause are skipped.",
            "Resumed %(count)d schedules from their next ticks; the ticks that "
            "fell in the pause are skipped.",
            len(changed),
        ) % {"count": len(changed)}
        if unchanged:
            text += " " + ngettext(
                "%(count)d was not paused.",
                "%(count)d were not paused.",
                unchanged,
            ) % {"count": unchanged}
    model_admin.message_user(
        request, text, messages.SUCCESS if changed else messages.WARNING
    )
    if changed and request.user.pk is not None:
        LogEntry.objects.log_actions(
            user_id=request.user.pk,
            queryset=changed,
            action_flag=CHANGE,
            change_message=_("Paused.") if pausing else _("Resumed."),
        )
    logger.info(
        "admin: %s %s %d periodic schedule(s)",
        request.user,
        "paused" if pausing else "resumed",
        len(changed),
    )


@admin.action(permissions=["pause"], description=gettext_lazy("Pause"))
def pause_schedules(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[PeriodicSchedule],
) -> None:
    _act(model_admin, request, queryset, pausing=True)


@admin.action(permissions=["pause"], description=gettext_lazy("Resume"))
def resume_schedules(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[PeriodicSchedule],
) -> None:
    _act(model_admin, request, queryset, pausing=False)


class PeriodicScheduleAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "definition_label",
        "next_tick_label",
        "last_tick_label",
        "behind_label",
        "ticks_link",
    )
    search_fields = ("name",)
    list_filter = ("paused",)
    ordering = ("name",)
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    actions = (pause_schedules, resume_schedules)
    fields = (
        "name",
        "definition_label",
        "next_tick_label",
        "last_tick_label",
        "behind_label",
        "planned_through",
        "paused_at",
        "removed_at",
        "created_at",
        "ticks_link",
    )

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return self.has_verb_permission(request, "pause")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _ScheduleChangeList

    def get_queryset(self, request: HttpRequest) -> QuerySet[PeriodicSchedule]:
        # The latest tick at or before now, in the same query: a tick's key
        # ends with its UTC time, written so that keys sort as times do, and
        # the range on the key is read from its index.
        prefix = tick_prefix_sql(OuterRef("name"))
        latest = (
            DelayedTask.objects.using(read_db())
            .filter(
                key__startswith=prefix,
                key__gt=prefix,
                key__lte=tick_key_sql(OuterRef("name"), timezone.now()),
            )
            .order_by("-key", "-id")
            .values
        )
        rows: QuerySet[PeriodicSchedule] = super().get_queryset(request)
        return rows.annotate(
            last_tick_id=Subquery(latest("id")[:1]),
            last_tick_key=Subquery(latest("key")[:1]),
            last_tick_status=Subquery(latest("status")[:1]),
        )

    @admin.display(description=gettext_lazy("when"), ordering="definition")
    def definition_label(self, row: PeriodicSchedule) -> SafeString:
        schedule = _shown(row).schedule
        if schedule is None:
            return format_html("{}", row.definition)
        if schedule.every is not None:
            words = _("every %(period)s") % {"period": _period(schedule.every)}
        else:
            words = _("cron %(cron)s in %(zone)s") % {
                "cron": schedule.cron,
                "zone": schedule.zone().key,
            }
        return format_html(
            '{}<br><span class="delayq-quiet">{}</span>',
            words,
            _("catch up: %(policy)s") % {"policy": schedule.catch_up},
        )

    @admin.display(description=gettext_lazy("next tick"))
    def next_tick_label(self, row: PeriodicSchedule) -> SafeString | str:
        shown = _shown(row)
        if shown.state.state != "active":
            return str(_STATE_LABELS[shown.state.state])
        if shown.schedule is None:
            return _("not declared in this code")
        tick = shown.schedule.next_tick(shown.now)
        if tick is None:
            return _("none")
        if timezone.is_naive(shown.now):  # USE_TZ = False: local, as Django's
            tick = timezone.make_naive(tick)
        return format_html(
            '{}<br><span class="delayq-quiet">{}</span>',
            display.timestamp(tick),
            display.until(tick, shown.now),
        )

    @admin.display(description=gettext_lazy("last tick"))
    def last_tick_label(self, row: PeriodicSchedule) -> SafeString | str:
        task_id = getattr(row, "last_tick_id", None)
        if task_id is None:
            return self.get_empty_value_display()
        key: str = row.last_tick_key  # type: ignore[attr-defined]
        status = Status(row.last_tick_status)  # type: ignore[attr-defined]
        # A key under the schedule's prefix written by hand names no tick:
        # shown as it is.
        tick = parse_tick_key(key)
        url = reverse(
            "admin:django_delayq_delayedtask_change",
            args=[task_id],
            current_app=self.admin_site.name,
        )
        return format_html(
            '<a href="{}">{}</a><br><span class="delayq-status delayq-status-{}">'
            "{}</span>",
            url,
            key if tick is None else display.timestamp(tick[1]),
            status.value,
            status.label.capitalize(),
        )

    @admin.display(description=gettext_lazy("behind"))
    def behind_label(self, row: PeriodicSchedule) -> SafeString | str:
        shown = _shown(row)
        if shown.state.state != "active":
            return self.get_empty_value_display()
        if shown.state.unplanned(shown.now):
            return format_html(
                '<span class="delayq-warning">{}</span>',
                _("behind: nothing plans it (is delayq_dispatch running?)"),
            )
        if shown.state.late_ticks:
            return format_html(
                '<span class="delayq-warning">{}</span>',
                ngettext(
                    "behind: %(count)d tick not started",
                    "behind: %(count)d ticks not started",
                    shown.state.late_ticks,
                )
                % {"count": shown.state.late_ticks},
            )
        return _("no")

    @admin.display(description=gettext_lazy("ticks"))
    def ticks_link(self, row: PeriodicSchedule) -> SafeString:
        # The task list's search takes the start of a dedupe key.
        url = reverse(
            "admin:django_delayq_delayedtask_changelist",
            current_app=self.admin_site.name,
        )
        return format_html(
            '<a href="{}?{}">{}</a>',
            url,
            urlencode({"q": tick_prefix(row.name)}),
            _("all ticks"),
        )


def _period(every: datetime.timedelta) -> str:
    """``'30 s'``, ``'5 min'``, ``'2 h'``, ``'1 day'``: exact, unlike
    :func:`display.duration`, which rounds down."""
    seconds = every.total_seconds()
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            if unit == "day":
                return ngettext("%(n)d day", "%(n)d days", count) % {"n": count}
            return f"{count} {unit}"
    return f"{seconds:g} s"
