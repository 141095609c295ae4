"""The dashboard page: the queues' state from the database and from Redis.

The database figures always show. Redis is read in three round trips (the
shards, the workers' heartbeats, the activity counters), each with the
short ``REDIS_TIMEOUT`` of the scheduling path; when it fails or times out
the page says so in a banner and shows the database side only. With
``DELAYQ`` invalid, the page shows the settings check's message instead.

Each queue shows whether it is paused, from the
:class:`~django_delayq.models.PausedQueue` rows. Users with the
``django_delayq.change_pausedqueue`` permission also get a Pause or Resume
button, a POST to :func:`pause_or_resume`, which calls
:func:`~django_delayq.queues.pause_queue` or
:func:`~django_delayq.queues.resume_queue` as ``delayq_queue`` does.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from .. import registry
from ..conf import get_settings
from ..exceptions import InvalidConfiguration, RedisUnavailable, UnknownQueue
from ..limits.groups import limited_queues
from ..limits.usage import LimitState, limit_states
from ..models import PausedQueue, Status
from ..queues import pause_queue, paused_queues, resume_queue
from ..store import activity, stats
from ..store.connection import get_client
from ..store.errors import error_text
from . import activity_charts, chart, display, figures

logger = logging.getLogger(__name__)

#: Shows the Pause and Resume buttons, and lets them act: Django's default
#: permission of the model whose rows a pause writes (no migration).
PAUSE_PERMISSION = "django_delayq.change_pausedqueue"


@dataclass
class ShardRow:
    state: stats.ShardState
    next_due: str
    lease_ttl: str
    stalled: bool  # tasks wait in the due-set, and no dispatcher owns it


@dataclass
class Dispatcher:
    token: str
    shards: list[str]
    ttl: str


@dataclass
class WorkerProcess:
    name: str
    threads: int
    shards: int
    pending: int
    idle: str
    quiet: bool


@dataclass
class RedisView:
    location: str
    error: str | None = None
    shards: list[ShardRow] = field(default_factory=list)
    dispatchers: list[Dispatcher] = field(default_factory=list)
    workers: list[WorkerProcess] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: the workers' counters of the last hour, oldest minute first
    minutes: list[activity.Minute] = field(default_factory=list)
    #: each concurrency or rate limit's use (see django_delayq.limits)
    limits: list[LimitState] = field(default_factory=list)
    due: int = 0
    waiting: int = 0
    pending: int = 0
    dead: int = 0


def render(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest
) -> TemplateResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    try:
        get_settings()
    except InvalidConfiguration as exc:
        # Said on the page, not as a server error: its message is the
        # settings check's (credentials masked) and says how to fix it.
        return TemplateResponse(
            request,
            "admin/django_delayq/dashboard_unconfigured.html",
            {
                **model_admin.admin_site.each_context(request),
                "title": _("Delayed tasks dashboard"),
                "opts": model_admin.opts,
                "error": str(exc),
                **display.breadcrumbs(
                    model_admin.opts,
                    model_admin.admin_site.name,
                    (None, _("Dashboard")),
                ),
            },
        )
    now = timezone.now()
    db = figures.read(now)
    live = read_redis(now)
    site = model_admin.admin_site.name
    changelist = reverse("admin:django_delayq_delayedtask_changelist", current_app=site)
    statuses = list(Status)
    # From the database written to, not a replica: the page an operator
    # lands on after pressing Pause must show the pause.
    paused = {row.name: row for row in paused_queues()}
    # A paused queue no longer configured and without rows still shows, so
    # that it can be resumed.
    queues = db.queues + [
        figures.QueueCounts(name, [0] * len(statuses), 0, configured=False)
        for name in sorted(set(paused) - {row.queue for row in db.queues})
    ]
    context = {
        **model_admin.admin_site.each_context(request),
        "title": _("Delayed tasks dashboard"),
        "subtitle": None,
        "opts": model_admin.opts,
        "app_label": model_admin.opts.app_label,
        "db": db,
        "by_status": {
            status.value: total for status, total in zip(Status, db.totals, strict=True)
        },
        "redis": live,
        "statuses": [
            {"label": status.label, "url": _filtered(changelist, status=status)}
            for status in statuses
        ],
        "queue_rows": [
            {
                "queue": row,
                "cells": [
                    {"count": count, "url": _filtered(changelist, s, row.queue)}
                    for s, count in zip(statuses, row.counts, strict=True)
                ],
                "url": _filtered(changelist, queue=row.queue),
                "paused": _paused_text(paused.get(row.queue)),
            }
            for row in queues
        ],
        "can_pause": can_pause(request),
        "pause_url": reverse("admin:django_delayq_dashboard_queue", current_app=site),
        "overdue_url": _filtered(changelist, status=Status.SCHEDULED),
        "worst_lateness": (
            display.lateness_text(db.worst_lateness) if db.worst_lateness else ""
        ),
        "overdue_tasks": [
            {
                "task": task,
                "url": reverse(
                    "admin:django_delayq_delayedtask_change",
                    args=[task.pk],
                    current_app=site,
                ),
                "run_at": display.timestamp(task.run_at),
                "timing": display.timing(task, now),
            }
            for task in db.overdue_tasks
        ],
        "grace": int(figures.OVERDUE_GRACE.total_seconds()),
        "outbox_age": (
            display.duration((now - db.outbox_oldest).total_seconds())
            if db.outbox_oldest
            else ""
        ),
        "outbox_url": (
            reverse("admin:django_delayq_outboxentry_changelist", current_app=site)
            if request.user.has_perm("django_delayq.view_outboxentry")
            else ""
        ),
        "chart": chart.per_minute(db.due_per_minute, db.chart_start),
        "activity_chart": activity_charts.activity(live.minutes),
        "lateness_chart": activity_charts.lateness(live.minutes),
        "changelist_url": changelist,
        "generated_at": display.timestamp(now),
        **display.breadcrumbs(model_admin.opts, site, (None, _("Dashboard"))),
    }
    request.current_app = site
    return TemplateResponse(request, "admin/django_delayq/dashboard.html", context)


def can_pause(request: HttpRequest) -> bool:
    """Whether the user may pause and resume queues."""
    return bool(request.user.has_perm(PAUSE_PERMISSION))


def pause_or_resume(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest
) -> HttpResponse:
    """Pause or resume the queue a dashboard button names (a POST with
    CSRF), then go back to the dashboard with a message."""
    if not (model_admin.has_view_permission(request) and can_pause(request)):
        raise PermissionDenied
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    name = request.POST.get("queue", "")
    op = request.POST.get("op", "")
    if not name or op not in ("pause", "resume"):
        return HttpResponseBadRequest("a queue and op=pause|resume are required")
    user = request.user.get_username()
    try:
        if op == "pause":
            reason = request.POST.get("reason", "").strip()
            changed = pause_queue(name, by=user, reason=reason)
            text = (
                _(
                    "Queue '%(queue)s' paused: no worker starts its tasks until "
                    "it is resumed; the tasks running now finish."
                )
                if changed
                else _("Queue '%(queue)s' was paused already: nothing changed.")
            )
        else:
            changed = resume_queue(name)
            text = (
                _(
                    "Queue '%(queue)s' resumed: its tasks due meanwhile start, "
                    "in the order they fell due."
                )
                if changed
                else _("Queue '%(queue)s' was not paused: nothing changed.")
            )
    except UnknownQueue as exc:
        model_admin.message_user(request, str(exc), messages.ERROR)
    else:
        model_admin.message_user(
            request,
            text % {"queue": name},
            messages.SUCCESS if changed else messages.WARNING,
        )
        if changed:
            logger.info("admin: %s %sd queue %s", user, op, name)
    return HttpResponseRedirect(
        reverse(
            "admin:django_delayq_dashboard", current_app=model_admin.admin_site.name
        )
    )


def _paused_text(row: PausedQueue | None) -> str:
    """Since when, by whom and why a queue is paused ("" if it is not)."""
    if row is None:
        return ""
    text = _("since %(when)s") % {"when": display.timestamp(row.paused_at)}
    if row.paused_by:
        text += " " + _("by %(user)s") % {"user": row.paused_by}
    if row.reason:
        text += ": " + row.reason
    return text


def read_redis(now: datetime.datetime) -> RedisView:
    """What Redis says of every configured shard, or why it could not say."""
    settings = get_settings()
    location = _("the configured server")
    try:
        client = get_client("schedule")
        location = stats.describe(client)
        registry.autodiscover()  # the tasks' limits
        limited = limited_queues(client)
        shards, live = stats.snapshot(
            client, settings.key_prefix, settings.queues.values(), limited
        )
        limits = limit_states(client) if limited else []
        alive = live.workers
        minutes = activity.read_hour(
            client, settings.key_prefix, settings.queues.values(), now
        )
    except RedisUnavailable as exc:
        logger.warning(
            "django-delayq admin: Redis at %s did not answer (%s)",
            location,
            error_text(exc),
        )
        return RedisView(location=location, error=error_text(exc))
    view = RedisView(location=location, minutes=minutes, limits=limits)
    holders: dict[str, Dispatcher] = {}
    workers: dict[str, dict[str, Any]] = {}
    for state in shards:
        next_due = ""
        if state.head_score is not None:
            head = datetime.datetime.fromtimestamp(
                state.head_score / 1000, datetime.UTC
            )
            next_due = display.until(head, now)
        ttl = display.duration(state.lease_ttl_ms / 1000) if state.lease_ttl_ms else ""
        view.shards.append(
            ShardRow(
                state, next_due, ttl, stalled=bool(state.due) and not state.lease_holder
            )
        )
        if state.lease_holder:
            holder = holders.setdefault(
                state.lease_holder, Dispatcher(state.lease_holder, [], ttl)
            )
            holder.shards.append(state.label)
        for consumer in state.consumers:
            process, _sep, thread = consumer.name.rpartition("-")
            if not process or not thread.isdigit():
                process = consumer.name
            seen = workers.setdefault(
                process,
                {"threads": set(), "shards": set(), "pending": 0, "idle": None},
            )
            seen["threads"].add(consumer.name)
            seen["shards"].add(state.label)
            seen["pending"] += consumer.pending
            idle = seen["idle"]
            seen["idle"] = (
                consumer.idle_ms if idle is None else min(idle, consumer.idle_ms)
            )
        view.problems += [f"{state.label}: {problem}" for problem in state.problems]
        view.due += state.due
        view.waiting += state.waiting
        view.pending += state.pending
        view.dead += state.dead
    view.dispatchers = sorted(holders.values(), key=lambda d: d.token)
    for name, queues in alive.items():
        seen = workers.setdefault(  # up, and maybe has read nothing yet
            name, {"threads": set(), "shards": set(), "pending": 0, "idle": None}
        )
        # The shards it reads, from the queues its heartbeat names: those
        # that delivered nothing to it yet count too.
        seen["shards"].update(
            f"{queue}:{number}"
            for queue in queues
            if queue in settings.queues
            for number in range(settings.queues[queue].shards)
        )
    view.workers = [
        WorkerProcess(
            name=name,
            threads=len(seen["threads"]),
            shards=len(seen["shards"]),
            pending=seen["pending"],
            idle="" if seen["idle"] is None else display.duration(seen["idle"] / 1000),
            # Liveness from the worker's own heartbeat: the idle time Redis
            # keeps for a consumer also grows while it blocks waiting for
            # work (Redis 7.0), so it cannot tell idle from dead.
            quiet=name not in alive,
        )
        for name, seen in sorted(workers.items())
    ]
    return view


def _filtered(
    changelist: str, status: str | None = None, queue: str | None = None
) -> str:
    params = {}
    if status is not None:
        params["status__exact"] = str(status)
    if queue is not None:
        params["queue"] = queue
    return f"{changelist}?{urlencode(params)}" if params else changelist
