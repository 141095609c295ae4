from __future__ import annotations

from django.db import models


class Order(models.Model):
    class Status(models.TextChoices):
        UNPAID = "unpaid"
        PAID = "paid"
        CANCELLED = "cancelled"

    item = models.CharField(max_length=100)
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.UNPAID
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"Order #{self.pk} ({self.item}, {self.status})"

    @property
    def cancel_key(self) -> str:
        """The dedupe key of this order's "cancel if unpaid" task."""
        return f"order-cancel:{self.pk}"


class Coupon(models.Model):
    """A discount code given with an order, valid until ``expires_at``.

    Its holder is reminded shortly before it expires, by a delayed task that
    records the reminder in ``reminded_at``.
    """

    code = models.CharField(max_length=32, unique=True)
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="coupons")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    reminded_at = models.DateTimeField(null=True, blank=True)
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"Coupon {self.code} (order #{self.order_id})"

    @property
    def remind_key(self) -> str:
        """The dedupe key of this coupon's "expires soon" reminder task."""
        return f"coupon-remind:{self.pk}"
