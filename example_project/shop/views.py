from __future__ import annotations

import datetime
import secrets

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from django_delayq import aschedule, cancel, schedule

from . import live
from .forms import OrderForm
from .models import Coupon, Order
from .tasks import coupon_remind, order_cancel


@require_GET
def order_list(request: HttpRequest) -> HttpResponse:
    return _page(request, OrderForm())


@require_GET
def state(request: HttpRequest) -> JsonResponse:
    """What the page shows, polled by its script every second."""
    return JsonResponse(live.snapshot())


@require_POST
def order_create(request: HttpRequest) -> HttpResponse:
    form = OrderForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    with transaction.atomic():
        order = Order.objects.create(item=form.cleaned_data["item"])
        # Joins this transaction: if anything below fails, neither the order
        # nor its cancel task exists, and Redis never hears of it.
        schedule(
            order_cancel,
            delay=form.cleaned_data["cancel_after"],
            args=[order.pk],
            key=order.cancel_key,
        )
    return redirect("shop:orders")


@require_POST
async def order_create_async(request: HttpRequest) -> JsonResponse:
    """The same order, from an async view (served by an ASGI server): JSON
    in, JSON out.

    ``aschedule()`` writes the task row on the thread that holds the
    request's database connection, as the ORM's a-methods do; with no
    transaction open it commits at once and the task is indexed before it
    returns.
    """
    form = OrderForm(request.POST)
    if not form.is_valid():
        return JsonResponse({"errors": form.errors}, status=400)
    order = await Order.objects.acreate(item=form.cleaned_data["item"])
    task = await aschedule(
        order_cancel,
        delay=form.cleaned_data["cancel_after"],
        args=[order.pk],
        key=order.cancel_key,
    )
    return JsonResponse({"order": order.pk, "task": str(task.pk)}, status=201)


@require_POST
def order_pay(request: HttpRequest, pk: int) -> HttpResponse:
    with transaction.atomic():
        order = get_object_or_404(Order.objects.select_for_update(), pk=pk)
        if order.status == Order.Status.UNPAID:
            order.status = Order.Status.PAID
            order.save(update_fields=["status"])
            cancel(key=order.cancel_key)
    return redirect("shop:orders")


@require_POST
def coupon_create(request: HttpRequest, pk: int) -> HttpResponse:
    lifetime = datetime.timedelta(seconds=settings.SHOP_COUPON_LIFETIME)
    lead = datetime.timedelta(seconds=settings.SHOP_COUPON_REMIND_BEFORE)
    with transaction.atomic():
        order = get_object_or_404(Order, pk=pk)
        coupon = Coupon.objects.create(
            code=f"SAVE-{secrets.token_hex(3).upper()}",
            order=order,
            expires_at=timezone.now() + lifetime,
        )
        # A lead time longer than the lifetime means "remind at once".
        schedule(
            coupon_remind,
            eta=max(coupon.expires_at - lead, timezone.now()),
            args=[coupon.pk],
            key=coupon.remind_key,
        )
    return redirect("shop:orders")


@require_POST
def coupon_use(request: HttpRequest, pk: int) -> HttpResponse:
    with transaction.atomic():
        coupon = get_object_or_404(Coupon.objects.select_for_update(), pk=pk)
        if coupon.used_at is None and coupon.expires_at > timezone.now():
            coupon.used_at = timezone.now()
            coupon.save(update_fields=["used_at"])
            # A used coupon needs no reminder.
            cancel(key=coupon.remind_key)
    return redirect("shop:orders")


@require_POST
def coupon_delete(request: HttpRequest, pk: int) -> HttpResponse:
    with transaction.atomic():
        coupon = get_object_or_404(Coupon.objects.select_for_update(), pk=pk)
        # In the same transaction: the reminder is cancelled if and only if
        # the coupon is gone.
        cancel(key=coupon.remind_key)
        coupon.delete()
    return redirect("shop:orders")


def _page(request: HttpRequest, form: OrderForm, status: int = 200) -> HttpResponse:
    context = {
        "state": live.snapshot(),
        "form": form,
        "cancel_delay": live.duration(
            datetime.timedelta(seconds=settings.SHOP_ORDER_CANCEL_DELAY)
        ),
        "coupon_lifetime": live.duration(
            datetime.timedelta(seconds=settings.SHOP_COUPON_LIFETIME)
        ),
        "coupon_remind_before": live.duration(
            datetime.timedelta(seconds=settings.SHOP_COUPON_REMIND_BEFORE)
        ),
        "tasks_url": _admin_url("admin:django_delayq_delayedtask_changelist"),
        "dashboard_url": _admin_url("admin:django_delayq_dashboard"),
    }
    return render(request, "shop/orders.html", context, status=status)


def _admin_url(name: str) -> str | None:
    """The URL of an admin page, or None while the admin does not provide it."""
    try:
        return reverse(name)
    except NoReverseMatch:
        return None
