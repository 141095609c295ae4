"""The shop's delayed tasks."""

from __future__ import annotations

import logging

from django.utils import timezone

from django_delayq import task

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
