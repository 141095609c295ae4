from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from django_delayq import cancel, schedule
from django_delayq.models import DelayedTask

from .models import Order
from .tasks import order_cancel


@require_GET
def order_list(request: HttpRequest) -> HttpResponse:
    orders = list(Order.objects.all()[:50])
    keys = [order.cancel_key for order in orders]
    # The latest cancel task of each order, in one query.
    tasks: dict[str, DelayedTask] = {}
    for row in DelayedTask.objects.filter(key__in=keys).order_by("created_at"):
        assert row.key is not None
        tasks[row.key] = row
    rows = [(order, tasks.get(order.cancel_key)) for order in orders]
    return render(
        request,
        "shop/orders.html",
        {"rows": rows, "cancel_delay": settings.SHOP_ORDER_CANCEL_DELAY},
    )


@require_POST
def order_create(request: HttpRequest) -> HttpResponse:
    item = request.POST.get("item", "").strip()[:100] or "T-shirt"
    with transaction.atomic():
        order = Order.objects.create(item=item)
        # Joins this transaction: if anything below fails, neither the order
        # nor its cancel task exists, and Redis never hears of it.
        schedule(
            order_cancel,
            delay=settings.SHOP_ORDER_CANCEL_DELAY,
            args=[order.pk],
            key=order.cancel_key,
        )
    return redirect("shop:orders")


@require_POST
def order_pay(request: HttpRequest, pk: int) -> HttpResponse:
    with transaction.atomic():
        order = get_object_or_404(Order.objects.select_for_update(), pk=pk)
        if order.status == Order.Status.UNPAID:
            order.status = Order.Status.PAID
            order.save(update_fields=["status"])
            cancel(key=order.cancel_key)
    return redirect("shop:orders")
