"""The shop's own tests, with django-delayq's testing toolkit: no Redis and
no worker needed; ``run_due()`` runs what is due, in this process.

Run them with ``python manage.py test shop``.
"""

from __future__ import annotations

import datetime

from asgiref.sync import sync_to_async
from django.test import TestCase
from django.urls import reverse
from django.utils import timezone

from django_delayq.testing import (
    assert_not_scheduled,
    assert_scheduled,
    run_due,
    test_mode,
)

from .models import Order
from .tasks import order_cancel


@test_mode("manual")
class OrderCancelTests(TestCase):
    def create_order(self) -> Order:
        response = self.client.post(
            reverse("shop:order-create"), {"item": "T-shirt", "cancel_after": 900}
        )
        assert response.status_code == 302
        return Order.objects.get()

    def test_a_new_order_schedules_its_cancellation(self) -> None:
        in_15_min = timezone.now() + datetime.timedelta(minutes=15)
        order = self.create_order()
        assert_scheduled(
            order_cancel,
            args=[order.pk],
            key=order.cancel_key,
            eta=(in_15_min, in_15_min + datetime.timedelta(minutes=1)),
        )

    def test_an_order_still_unpaid_15_minutes_later_is_cancelled(self) -> None:
        order = self.create_order()
        ran = run_due(until=timezone.now() + datetime.timedelta(minutes=16))
        assert [r.outcome for r in ran] == ["succeeded"]
        order.refresh_from_db()
        assert order.status == Order.Status.CANCELLED

    def test_a_paid_order_is_not_cancelled(self) -> None:
        order = self.create_order()
        self.client.post(reverse("shop:order-pay", args=[order.pk]))
        assert_not_scheduled(order_cancel)
        run_due(until=timezone.now() + datetime.timedelta(minutes=16))
        order.refresh_from_db()
        assert order.status == Order.Status.PAID


@test_mode("manual")
class AsyncOrderTests(TestCase):
    async def test_the_async_view_schedules_the_cancellation(self) -> None:
        response = await self.async_client.post(
            reverse("shop:order-create-async"), {"item": "Mug", "cancel_after": 60}
        )
        assert response.status_code == 201
        order = await Order.objects.aget(pk=response.json()["order"])
        assert order.item == "Mug"
        # The toolkit reads the database: from async code, through the
        # thread that holds the test's connection.
        await sync_to_async(assert_scheduled)(order_cancel, args=[order.pk])
