from __future__ import annotations

from django.urls import path

from . import views

app_name = "shop"
urlpatterns = [
    path("", views.order_list, name="orders"),
    path("state.json", views.state, name="state"),
    path("orders/", views.order_create, name="order-create"),
    path("api/orders/", views.order_create_async, name="order-create-async"),
    path("orders/<int:pk>/pay/", views.order_pay, name="order-pay"),
    path("orders/<int:pk>/coupon/", views.coupon_create, name="coupon-create"),
    path("coupons/<int:pk>/use/", views.coupon_use, name="coupon-use"),
    path("coupons/<int:pk>/delete/", views.coupon_delete, name="coupon-delete"),
]
