from __future__ import annotations

from django.urls import path

from . import views

app_name = "shop"
urlpatterns = [
    path("", views.order_list, name="orders"),
    path("orders/", views.order_create, name="order-create"),
    path("orders/<int:pk>/pay/", views.order_pay, name="order-pay"),
]
