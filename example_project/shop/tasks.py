"""The shop's delayed tasks."""

from __future__ import annotations

import datetime
import logging

from django.db.models import Count
from django.utils import timezone

from django_delayq import periodic, task

from .models import Coupon, Order

logger = logging.getLogger(__name__)


@task(queue="orders", max_attempts=5)
def order_cancel(order_id: int) -> None:
    """Cancel the order if it is still unpaid."""
    cancelled = Order.objects.filter(pk=order_id, status=Order.Status.UNPAID).update(
        status=Order.Status.CANCELLED
    )
    logger.info("order %s: %s", order_id, "cancelled" if cancelled else "kept")


@task(queue="coupons", max_attempts=5)
def coupon_remind(coupon_id: int) -> None:
    """Remind the holder that the coupon expires soon, unless it is used or gone."""
    now = timezone.now()
    # One conditional UPDATE: a coupon used or deleted meanwhile, or one
    # already past its expiry (the reminder ran very late), is left alone,
    # and a second run of this task changes nothing.
    reminded = Coupon.objects.filter(
        pk=coupon_id, used_at=None, reminded_at=None, expires_at__gt=now
    ).update(reminded_at=now)
    # A real shop would send the e-mail here; the row is what the page shows.
    logger.info("coupon %s: %s", coupon_id, "reminded" if reminded else "skipped")


#: Longer than any order waits for its own cancel task (the form's maximum).
STALE_AFTER = datetime.timedelta(days=30)


@periodic(every=datetime.timedelta(seconds=30), name="close-stale-orders")
def close_stale_orders() -> None:
    """Cancel orders left unpaid for longer than any order waits: a safety
    net for an order whose own cancel task was cancelled by hand in the
    admin. One UPDATE, usually of nothing."""
    closed = Order.objects.filter(
        status=Order.Status.UNPAID, created_at__lt=timezone.now() - STALE_AFTER
    ).update(status=Order.Status.CANCELLED)
    if closed:
        logger.info("closed %d stale unpaid order(s)", closed)


@periodic(cron="0 8 * * *", timezone="Asia/Shanghai", name="daily-orders-report")
def daily_orders_report(tick: datetime.datetime) -> None:
    """The orders of the day before 08:00 Shanghai time, by status.

    ``tick`` is the scheduled time, not the time it runs: a report run late
    (or caught up after a restart) still covers its own day.
    """
    by_status = dict(
        Order.objects.filter(
            created_at__gte=tick - datetime.timedelta(days=1), created_at__lt=tick
        )
        .values_list("status")
        .annotate(n=Count("pk"))
        .order_by()
    )
    logger.info("orders of the day to %s: %s", tick.isoformat(), by_status or "none")
