"""The test URLconf with the metrics view (importing it enables metrics)."""

from __future__ import annotations

from django.urls import path

from django_delayq.metrics.views import metrics_view
from tests.urls import urlpatterns as base

urlpatterns = [*base, path("delayq/metrics", metrics_view)]
