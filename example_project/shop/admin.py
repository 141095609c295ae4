from __future__ import annotations

from django.contrib import admin

from .models import Coupon, Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ("id", "item", "status", "created_at")
    list_filter = ("status",)


@admin.register(Coupon)
class CouponAdmin(admin.ModelAdmin):
    list_display = ("code", "order", "expires_at", "reminded_at", "used_at")
    raw_id_fields = ("order",)
