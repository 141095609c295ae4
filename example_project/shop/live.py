"""What the shop page shows about orders, coupons and their tasks.

One function builds it for both the first render of the page and the JSON the
page polls every second, so both always say the same thing.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from django_delayq.admin.display import lateness, lateness_text
from django_delayq.models import DelayedTask, Status

from .models import Coupon, Order

#: How many of the newest orders and coupons the page lists.
LIMIT = 50


def snapshot(now: datetime.datetime | None = None) -> dict[str, Any]:
    """The orders and coupons, each with the state of its latest task."""
    now = now or timezone.now()
    orders = list(Order.objects.all()[:LIMIT])
    coupons = list(Coupon.objects.all()[:LIMIT])
    tasks = latest_tasks(
        [o.cancel_key for o in orders] + [c.remind_key for c in coupons]
    )
    return {
        "now": now.isoformat(timespec="milliseconds"),
        "orders": [
            {
                "id": order.pk,
                "item": order.item,
                "status": order.status,
                "task": task_state(tasks.get(order.cancel_key), now),
            }
            for order in orders
        ],
        "coupons": [coupon_state(c, tasks.get(c.remind_key), now) for c in coupons],
    }


def latest_tasks(keys: list[str]) -> dict[str, DelayedTask]:
    """The newest task of each dedupe key, in one query."""
    found: dict[str, DelayedTask] = {}
    # Oldest first, so the newest task of a key is the one left in the dict.
    for row in DelayedTask.objects.filter(key__in=keys).order_by("created_at"):
        assert row.key is not None
        found[row.key] = row
    return found


def coupon_state(
    coupon: Coupon, task: DelayedTask | None, now: datetime.datetime
) -> dict[str, Any]:
    if coupon.used_at is not None:
        state, text = "used", f"used at {clock(coupon.used_at)}"
    elif coupon.expires_at <= now:
        state, text = "expired", f"expired at {clock(coupon.expires_at)}"
    else:
        state, text = "valid", f"expires in {duration(coupon.expires_at - now)}"
    return {
        "id": coupon.pk,
        "code": coupon.code,
        "order": coupon.order_id,
        "state": state,
        "text": text,
        "reminded": (
            f"reminded at {clock(coupon.reminded_at)}"
            if coupon.reminded_at
            else "not reminded"
        ),
        "task": task_state(task, now),
    }


def task_state(task: DelayedTask | None, now: datetime.datetime) -> dict[str, Any]:
    if task is None:
        return {"status": "none", "text": "no task", "url": None}
    return {"status": task.status, "text": describe(task, now), "url": admin_url(task)}


def describe(task: DelayedTask, now: datetime.datetime) -> str:
    """When the task runs or ran, to read after its status: "scheduled runs in
    42 s", "succeeded ran 3 ms late", "cancelled 9 min before it was due"."""
    if task.status == Status.SCHEDULED:
        if task.run_at > now:
            return f"runs in {duration(task.run_at - now)}"
        # Due, and waiting for the dispatcher and a worker (or for the retry
        # of a failed attempt).
        return f"due {duration(now - task.run_at)} ago"
    if task.status == Status.RUNNING:
        assert task.started_at is not None
        return f"since {clock(task.started_at)}"
    if task.status == Status.SUCCEEDED:
        late = lateness(task)
        assert late is not None
        return f"ran {lateness_text(late)} late"
    if task.status == Status.FAILED:
        return f"after {task.attempts} attempts: {task.last_error}"
    if task.finished_at is not None and task.finished_at < task.run_at:
        return f"{duration(task.run_at - task.finished_at)} before it was due"
    return f"at {clock(task.finished_at or now)}"


def duration(delta: datetime.timedelta) -> str:
    """``"42 s"``, ``"14 min 5 s"``, ``"3 h 2 min"``, ``"7 d"``: rounded up to
    the second, in the two largest units."""
    seconds = max(0, math.ceil(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 3600:
        return _two_units(seconds // 60, "min", seconds % 60, "s")
    if seconds < 86400:
        return _two_units(seconds // 3600, "h", seconds % 3600 // 60, "min")
    return _two_units(seconds // 86400, "d", seconds % 86400 // 3600, "h")


def _two_units(major: int, major_unit: str, minor: int, minor_unit: str) -> str:
    if minor == 0:
        return f"{major} {major_unit}"
    return f"{major} {major_unit} {minor} {minor_unit}"


def clock(moment: datetime.datetime) -> str:
    return timezone.localtime(moment).strftime("%H:%M:%S")


def admin_url(task: DelayedTask) -> str | None:
    """The task's page in the admin, when the admin has it registered."""
    try:
        return reverse("admin:django_delayq_delayedtask_change", args=[task.pk])
    except NoReverseMatch:
        return None
