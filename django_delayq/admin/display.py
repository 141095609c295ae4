"""How the admin writes times, durations, payloads and a task's timeline.

Pure functions of a row and "now", so every page says the same thing the
same way ("in 14 min", "overdue 2 min", "ran 3 s late"). A time to come is
rounded up and a time gone by down: a task never reads as due sooner, or as
late for longer, than it is.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import Any

import django
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import capfirst
from django.utils.translation import gettext as _

from ..models import DelayedTask, Status
from ..text import clipped
from ..timing import lateness as lateness_of

#: Columns the task list and the confirmation pages never show: not loading
#: them keeps a page of 100 rows small whatever the payloads weigh.
HEAVY_FIELDS = ("args", "kwargs", "meta", "result", "last_traceback", "worker_ids")

#: Closer than this to its run_at, a scheduled task is "due now".
DUE_NOW_SECONDS = 1.0


def duration(seconds: float, *, up: bool = False) -> str:
    """``'350 ms'``, ``'3 s'``, ``'14 min'``, ``'2 h 5 min'``, ``'3 days'``.

    Rounded down to the unit shown, as a stopwatch reads: "overdue 2 min"
    means at least 2 and under 3 minutes. With ``up``, rounded up, as a
    countdown reads: "in 2 s" means at most 2 seconds, so a time to come is
    never shown sooner than it is (1.4 s away is "in 2 s", not "in 1 s").
    """
    # In whole microseconds, what a timedelta holds: rounding up must not
    # count a float's last bit (60.000000001 s) as one unit more.
    micros = round(abs(seconds) * 1_000_000)

    def count(unit: int) -> int:
        return -(-micros // unit) if up else micros // unit

    ms = count(1000)
    if ms < 1000:
        return _("%(n)d ms") % {"n": ms}
    whole = count(1_000_000)
    if whole < 60:
        return _("%(n)d s") % {"n": whole}
    minutes = count(60_000_000)
    if minutes < 60:
        return _("%(n)d min") % {"n": minutes}
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        if minutes:
            return _("%(h)d h %(m)d min") % {"h": hours, "m": minutes}
        return _("%(h)d h") % {"h": hours}
    return _("%(n)d days") % {"n": count(86_400_000_000)}


def ahead(seconds: float) -> str:
    """``'in 14 min'`` for a time ``seconds`` from now (rounded up)."""
    return _("in %(duration)s") % {"duration": duration(seconds, up=True)}


def lateness_text(seconds: float) -> str:
    """How late a run started: ``'3 ms'``, ``'1.2 s'``, ``'14 min'``.

    Rounded to the nearest millisecond, and to a tenth of a second from one
    second on: lateness is read to compare runs, and "1 s" would hide the
    difference between 1.0 and 1.9. The example project's shop page writes
    it with this function too, so both pages say the same of one task.
    """
    ms = max(0, round(seconds * 1000))
    if ms < 1000:
        return _("%(n)d ms") % {"n": ms}
    if ms < 60_000:
        return _("%(n).1f s") % {"n": ms / 1000}
    return duration(ms / 1000)


def until(moment: datetime.datetime, now: datetime.datetime) -> str:
    """``'in 14 min'``, ``'due now'`` or ``'overdue 2 min'``."""
    left = (moment - now).total_seconds()
    if left >= DUE_NOW_SECONDS:
        return ahead(left)
    if left > -DUE_NOW_SECONDS:
        return _("due now")
    return _("overdue %(duration)s") % {"duration": duration(left)}


def lateness(task: DelayedTask) -> float | None:
    """Seconds from when the task was due (:func:`~django_delayq.timing.lateness`)
    to the start of the run it belongs to, or None.

    Only a running or finished run has both ends: a scheduled task's
    ``started_at`` (if any) belongs to an earlier attempt than its ``run_at``,
    and a cancelled task did not start at its ``run_at``.
    """
    if task.status not in (Status.RUNNING, Status.SUCCEEDED, Status.FAILED):
        return None
    if task.started_at is None:
        return None
    return lateness_of(task.run_at, task.created_at, task.started_at)


def timing(task: DelayedTask, now: datetime.datetime) -> str:
    """The run time relative to now, or how late the last run started."""
    if task.status == Status.SCHEDULED:
        return until(task.run_at, now)
    late = lateness(task)
    if late is None:
        return ""
    on_time = round(late * 1000) <= 0
    if task.status == Status.RUNNING:
        if on_time:
            return _("started on time")
        return _("started %(duration)s late") % {"duration": lateness_text(late)}
    if on_time:
        return _("ran on time")
    return _("ran %(duration)s late") % {"duration": lateness_text(late)}


def timestamp(moment: datetime.datetime | None, *, precise: bool = False) -> str:
    """``'2030-01-02 09:00:00 UTC'`` in the current time zone; with
    ``precise``, to the millisecond (run times are whole milliseconds)."""
    if moment is None:
        return ""
    if timezone.is_aware(moment):
        moment = timezone.localtime(moment)
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    if precise:
        text += f".{moment.microsecond // 1000:03d}"
    zone = moment.tzname()
    return f"{text} {zone}" if zone else text


def attempts(task: DelayedTask) -> str:
    return f"{task.attempts}/{task.max_attempts}"


#: The most of a stored value one field of the change page shows: rows
#: written before errors were clipped, or with a raised MAX_PAYLOAD_BYTES,
#: may hold megabytes.
MAX_SHOWN_CHARS = 100_000


def pretty_json(value: Any) -> SafeString:
    """A JSON value indented in a ``<pre>``, HTML-escaped."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return format_html(
        '<pre class="delayq-pre">{}</pre>', clipped(text, MAX_SHOWN_CHARS)
    )


def preformatted(text: str) -> SafeString | str:
    if not text:
        return ""
    return format_html(
        '<pre class="delayq-pre">{}</pre>', clipped(text, MAX_SHOWN_CHARS)
    )


@dataclass(frozen=True)
class Event:
    label: str
    moment: datetime.datetime
    note: str = ""


def timeline(task: DelayedTask, now: datetime.datetime) -> list[Event]:
    """What the row records of the task's life, in time order.

    Only the row's own timestamps: earlier attempts leave no time behind
    (``started_at`` is the last run's), so none is made up for them.
    """
    events = []
    late = lateness(task)
    if task.status == Status.SCHEDULED:
        note = until(task.run_at, now)
        if task.attempts:
            note = _("%(when)s, for attempt %(n)d of %(max)d") % {
                "when": note,
                "n": task.attempts + 1,
                "max": task.max_attempts,
            }
        label = _("Next run due") if task.started_at else _("Due")
        events.append(Event(label, task.run_at, note))
    else:
        label = _("Last run due") if task.attempts > 1 else _("Due")
        events.append(Event(label, task.run_at))
    if task.started_at is not None:
        if late is not None:
            label = _("Last run started") if task.attempts > 1 else _("Started")
            events.append(Event(label, task.started_at, timing(task, now)))
        else:
            events.append(
                Event(_("Last run started"), task.started_at, _("an earlier run"))
            )
    if task.finished_at is not None:
        note = ""
        if late is not None and task.started_at is not None:
            took = (task.finished_at - task.started_at).total_seconds()
            note = _("after %(duration)s") % {"duration": duration(took)}
        label = {
            Status.SUCCEEDED: _("Succeeded"),
            Status.FAILED: _("Failed"),
            Status.CANCELLED: _("Cancelled"),
        }.get(Status(task.status), _("Finished"))
        events.append(Event(label, task.finished_at, note))
    if task.expires_at is not None:
        events.append(Event(_("Expires"), task.expires_at, expiry(task, now)))
    created = Event(_("Created"), task.created_at, _("schedule() was called"))
    return [created, *sorted(events, key=lambda event: event.moment)]


def expiry(task: DelayedTask, now: datetime.datetime) -> str:
    """What the task's ``expires_at`` means for it now: for a scheduled
    task, by when it must start; for one it cancelled, that it did."""
    assert task.expires_at is not None
    if task.status == Status.SCHEDULED:
        left = (task.expires_at - now).total_seconds()
        if left > 0:
            return _("if not started %(when)s, it is cancelled instead") % {
                "when": ahead(left)
            }
        return _("passed: a worker cancels it instead of running it")
    if task.status == Status.CANCELLED and task.last_error.startswith("expired at "):
        return _("passed before it could start: cancelled, not run")
    return ""


def timeline_html(task: DelayedTask, now: datetime.datetime) -> SafeString:
    rows = format_html_join(
        "",
        "<tr><th scope='row'>{}</th><td>{}</td><td>{}</td></tr>",
        (
            (event.label, timestamp(event.moment, precise=True), event.note)
            for event in timeline(task, now)
        ),
    )
    summary = _("Runs started: %(n)d of %(max)d allowed.") % {
        "n": task.attempts,
        "max": task.max_attempts,
    }
    if task.attempts > 1:
        summary += " " + _("The last %(n)d were retries.") % {"n": task.attempts - 1}
    return format_html(
        '<table class="delayq-timeline"><tbody>{}</tbody></table><p>{}</p>',
        rows,
        summary,
    )


def breadcrumbs(opts: Any, site: str, *tail: tuple[str | None, Any]) -> dict[str, Any]:
    """The context of ``includes/breadcrumbs.html``: Home, the app, the task
    list, then ``tail`` (the current page last, with no url), in the markup
    of the running Django's admin (a list from 6.0)."""
    crumbs = [
        (reverse("admin:index", current_app=site), _("Home")),
        (
            reverse(
                "admin:app_list", kwargs={"app_label": opts.app_label}, current_app=site
            ),
            opts.app_config.verbose_name,
        ),
        (
            reverse("admin:django_delayq_delayedtask_changelist", current_app=site),
            capfirst(opts.verbose_name_plural),
        ),
        *tail,
    ]
    return {"crumbs": crumbs, "crumbs_as_list": django.VERSION >= (6, 0)}
