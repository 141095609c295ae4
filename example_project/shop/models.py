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
