"""The shop's delayed tasks."""

from __future__ import annotations

import logging

from django_delayq import task

from .models import Order

logger = logging.getLogger(__name__)


@task(queue="orders", max_attempts=5)
def order_cancel(order_id: int) -> None:
    """Cancel the order if it is still unpaid."""
    cancelled = Order.objects.filter(pk=order_id, status=Order.Status.UNPAID).update(
        status=Order.Status.CANCELLED
    )
    logger.info("order %s: %s", order_id, "cancelled" if cancelled else "kept")
