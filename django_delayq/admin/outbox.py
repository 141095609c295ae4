"""The admin of :class:`~django_delayq.models.OutboxEntry`: a read-only list
of the Redis writes waiting for a replay, and a "Replay now" action."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from .. import outbox
from ..models import OutboxEntry, write_db
from . import display
from .readonly import ReadOnlyAdmin

#: Entries per replay_outbox() call, and the most calls one action makes.
BATCH = 500
MAX_BATCHES = 20


@admin.action(permissions=["replay"], description=gettext_lazy("Replay now"))
def replay_outbox(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[OutboxEntry],
) -> None:
    """Replay the selected entries now, whatever their backoff says.

    :func:`~django_delayq.outbox.replay_outbox` replays the entries due at its
    ``now=``, oldest first. Called "as of" the latest next attempt among the
    selected entries, it takes all of them, and the entries due before them
    as well; that is harmless, since a replay makes Redis agree with the row
    as it is now, and replaying twice is the same as once.
    """
    selected = list(queryset.values_list("pk", "next_attempt_at"))
    if not selected:
        return
    selected_ids = [pk for pk, _next in selected]
    as_of = max([timezone.now(), *(at for _pk, at in selected)])
    replayed = failed = 0
    for _batch in range(MAX_BATCHES):
        result = outbox.replay_outbox(batch_size=BATCH, now=as_of)
        replayed += result.replayed
        failed += result.failed
        if result.failed or result.replayed < BATCH:
            break
    # What the replay left, read where it wrote (a replica may lag).
    left = OutboxEntry.objects.using(write_db()).filter(pk__in=selected_ids)
    if failed:
        error = left.exclude(last_error="").values_list("last_error", flat=True)
        model_admin.message_user(
            request,
            ngettext(
                "Redis refused the replay (%(error)s): %(count)d entry was kept "
                "and will be tried again after its backoff.",
                "Redis refused the replay (%(error)s): %(count)d entries were "
                "kept and will be tried again after their backoff.",
                failed,
            )
            % {"error": error.first() or _("no error recorded"), "count": failed},
            messages.ERROR,
        )
    if replayed:
        text = ngettext(
            "Replayed %(count)d outbox entry: Redis agrees with its task again.",
            "Replayed %(count)d outbox entries: Redis agrees with their tasks again.",
            replayed,
        ) % {"count": replayed}
        others = replayed - (len(selected_ids) - left.count())
        if others > 0:
            text += " " + ngettext(
                "That includes %(count)d entry that was not selected but was due.",
                "That includes %(count)d entries that were not selected but were due.",
                others,
            ) % {"count": others}
        model_admin.message_user(request, text, messages.SUCCESS)
    waiting = left.count()
    if not failed and waiting:
        model_admin.message_user(
            request,
            ngettext(
                "%(count)d selected entry is still waiting behind older ones; "
                "run the action again.",
                "%(count)d selected entries are still waiting behind older "
                "ones; run the action again.",
                waiting,
            )
            % {"count": waiting},
            messages.WARNING,
        )


class OutboxEntryAdmin(ReadOnlyAdmin):
    list_display = (
        "action",
        "task_link",
        "shard_label",
        "error_label",
        "attempts",
        "age_label",
        "next_attempt_label",
    )
    list_filter = ("action",)
    search_fields = ("task_id",)
    search_help_text = gettext_lazy("A task id (the full UUID).")
    ordering = ("id",)
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = (replay_outbox,)
    fields = (
        "task_link",
        "action",
        "shard_label",
        "created_at",
        "attempts",
        "next_attempt_at",
        "last_error",
    )

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return self.has_verb_permission(request, "replay")

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[OutboxEntry], search_term: str
    ) -> tuple[QuerySet[OutboxEntry], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(task_id=uuid.UUID(term)), False
        except ValueError:
            return queryset.none(), False

    @admin.display(description=gettext_lazy("task"), ordering="task_id")
    def task_link(self, entry: OutboxEntry) -> SafeString:
        # The task id is no foreign key (the row may be gone), so the link
        # costs no query.
        url = reverse(
            "admin:django_delayq_delayedtask_change",
            args=[entry.task_id],
            current_app=self.admin_site.name,
        )
        return format_html('<a href="{}">{}</a>', url, entry.task_id)

    @admin.display(description=gettext_lazy("shard"), ordering="queue")
    def shard_label(self, entry: OutboxEntry) -> str:
        return f"{entry.queue}:{entry.shard}"

    @admin.display(description=gettext_lazy("last error"))
    def error_label(self, entry: OutboxEntry) -> str:
        return Truncator(entry.last_error).chars(120)

    @admin.display(description=gettext_lazy("age"), ordering="created_at")
    def age_label(self, entry: OutboxEntry) -> str:
        return display.duration((timezone.now() - entry.created_at).total_seconds())

    @admin.display(description=gettext_lazy("next attempt"), ordering="next_attempt_at")
    def next_attempt_label(self, entry: OutboxEntry) -> str:
        ahead = (entry.next_attempt_at - timezone.now()).total_seconds()
        if ahead < display.DUE_NOW_SECONDS:
            return _("due")
        return display.ahead(ahead)
