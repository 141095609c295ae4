"""The admins of the periodic schedules.

:class:`PeriodicScheduleAdmin` lists every schedule (declared in the code,
in ``DELAYQ["PERIODIC"]`` or in the admin) with its next and last ticks,
and Pause / Resume. Read only, like the other pages: only a schedule's
pause is the operator's there. Pause and resume call
:func:`~django_delayq.recurring.planner.pause` and
:func:`~django_delayq.recurring.planner.resume`, behind the permission
``django_delayq.pause_periodicschedule``.

:class:`RuntimeScheduleAdmin` edits the schedules defined in the database
(:class:`~django_delayq.models.RuntimeSchedule`): add, change, delete,
Enable / Disable, each recorded in the admin's log. Its form checks a
definition with :func:`~django_delayq.recurring.runtime.validate`, field
by field; the planner applies a saved change in its next round.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from .. import registry
from ..models import (
    DelayedTask,
    PeriodicSchedule,
    RuntimeSchedule,
    Status,
    read_db,
    write_db,
)
from ..recurring import CATCH_UP_POLICIES, Schedule
from ..recurring.overview import ScheduleState, late_ticks, state_of
from ..recurring.planner import pause, resume
from ..recurring.runtime import every_schedule, validate
from ..recurring.ticks import (
    parse_tick_key,
    tick_key_sql,
    tick_prefix,
    tick_prefix_sql,
)
from . import display
from .readonly import ReadOnlyAdmin, _ModelAdmin

logger = logging.getLogger(__name__)

_STATE_LABELS = {
    "active": gettext_lazy("active"),
    "paused": gettext_lazy("paused"),
    # A schedule the code no longer declares, or a runtime one disabled or
    # deleted: either way its future ticks were cancelled.
    "removed": gettext_lazy("removed or disabled"),
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
    """Every schedule planned: the code's and the enabled runtime ones."""
    return every_schedule()


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
    _report(
        model_admin,
        request,
        changed,
        text,
        logged=_("Paused.") if pausing else _("Resumed."),
        done="paused" if pausing else "resumed",
    )


def _report(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    changed: list[Any],
    text: str,
    *,
    logged: str,
    done: str,
) -> None:
    """Tell the user what an action changed, and record it in the admin's
    log (``logged``) and the process's (``done``)."""
    model_admin.message_user(
        request, text, messages.SUCCESS if changed else messages.WARNING
    )
    if changed and request.user.pk is not None:
        LogEntry.objects.log_actions(
            user_id=request.user.pk,
            queryset=changed,
            action_flag=CHANGE,
            change_message=logged,
        )
    logger.info(
        "admin: %s %s %d %s(s)",
        request.user,
        done,
        len(changed),
        model_admin.model._meta.verbose_name,
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


# -- schedules edited in the admin ---------------------------------------------


if TYPE_CHECKING:
    _ModelForm = forms.ModelForm[RuntimeSchedule]
else:
    # ModelForm is generic for type checkers only.
    _ModelForm = forms.ModelForm


class RuntimeScheduleForm(_ModelForm):
    """A runtime schedule's fields, checked together as the planner checks
    them (:func:`~django_delayq.recurring.runtime.validate`)."""

    task = forms.ChoiceField(
        label=gettext_lazy("Task"),
        help_text=gettext_lazy("A registered task (@task or @periodic)."),
    )
    catch_up = forms.ChoiceField(
        label=gettext_lazy("Catch up"),
        choices=[(policy, policy) for policy in CATCH_UP_POLICIES],
        initial="latest",
        help_text=RuntimeSchedule._meta.get_field("catch_up").help_text,
    )

    class Meta:
        model = RuntimeSchedule
        fields = (
            "name",
            "task",
            "args",
            "kwargs",
            "cron",
            "every",
            "time_zone",
            "queue",
            "priority",
            "catch_up",
            "enabled",
            "expires_at",
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        registry.autodiscover()
        names = sorted(registry.all_tasks())
        task_field = self.fields["task"]
        assert isinstance(task_field, forms.ChoiceField)
        task_field.choices = [("", "---------")] + [(name, name) for name in names]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned  # the fields' own errors first
        row = RuntimeSchedule(
            **{
                field.name: getattr(self.instance, field.name)
                for field in RuntimeSchedule._meta.concrete_fields
            }
        )
        for name, value in cleaned.items():
            setattr(row, name, "" if value is None and name in _TEXT else value)
        try:
            validate(row)
        except ValidationError as exc:
            for name, texts in exc.message_dict.items():
                # A field not in the form (the name, once created) shows
                # its error at the top.
                self.add_error(name if name in self.fields else None, texts)
        return cleaned


#: The form's text fields whose empty value the model stores as "".
_TEXT = frozenset({"cron", "time_zone", "queue"})


def _switch(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[RuntimeSchedule],
    enabled: bool,
) -> None:
    changed = list(queryset.filter(enabled=not enabled).order_by("name"))
    # One UPDATE, fenced on the state read: a row switched meanwhile by
    # someone else is not logged twice. The planner applies it in its next
    # round (about a second).
    RuntimeSchedule.objects.using(write_db()).filter(
        pk__in=[row.pk for row in changed], enabled=not enabled
    ).update(enabled=enabled, updated_at=timezone.now())
    if enabled:
        text = ngettext(
            "Enabled %(count)d schedule: it ticks from its next tick on.",
            "Enabled %(count)d schedules: they tick from their next ticks on.",
            len(changed),
        )
    else:
        text = ngettext(
            "Disabled %(count)d schedule: its ticks not yet due are cancelled.",
            "Disabled %(count)d schedules: their ticks not yet due are cancelled.",
            len(changed),
        )
    _report(
        model_admin,
        request,
        changed,
        text % {"count": len(changed)},
        logged=_("Enabled.") if enabled else _("Disabled."),
        done="enabled" if enabled else "disabled",
    )


@admin.action(permissions=["change"], description=gettext_lazy("Enable"))
def enable_schedules(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[RuntimeSchedule],
) -> None:
    _switch(model_admin, request, queryset, enabled=True)


@admin.action(permissions=["change"], description=gettext_lazy("Disable"))
def disable_schedules(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[RuntimeSchedule],
) -> None:
    _switch(model_admin, request, queryset, enabled=False)


class RuntimeScheduleAdmin(_ModelAdmin):
    form = RuntimeScheduleForm
    list_display = ("name", "task", "when_label", "enabled", "expires_at", "updated_at")
    list_filter = ("enabled",)
    search_fields = ("name", "task")
    ordering = ("name",)
    show_facets = admin.ShowFacets.NEVER
    actions = (enable_schedules, disable_schedules)
    fieldsets = (
        (None, {"fields": ("name", "task", "args", "kwargs", "enabled")}),
        (
            gettext_lazy("When"),
            {"fields": ("cron", "every", "time_zone", "catch_up", "expires_at")},
        ),
        (gettext_lazy("Ticks"), {"fields": ("queue", "priority", "ticks_link")}),
        (None, {"fields": ("created_at", "updated_at")}),
    )

    def get_readonly_fields(
        self, request: HttpRequest, obj: RuntimeSchedule | None = None
    ) -> tuple[str, ...]:
        # A name names the ticks' keys: a schedule of another name is
        # another schedule (add it, and delete this one).
        shown = ("ticks_link", "created_at", "updated_at")
        return ("name", *shown) if obj is not None else shown

    @admin.display(description=gettext_lazy("when"))
    def when_label(self, row: RuntimeSchedule) -> str:
        if row.every is not None and not row.cron:
            return _("every %(period)s") % {
                "period": _period(datetime.timedelta(seconds=row.every))
            }
        return _("cron %(cron)s in %(zone)s") % {
            "cron": row.cron,
            "zone": row.time_zone or _("settings.TIME_ZONE"),
        }

    @admin.display(description=gettext_lazy("ticks"))
    def ticks_link(self, row: RuntimeSchedule) -> SafeString | str:
        if row.pk is None:
            return self.get_empty_value_display()
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
