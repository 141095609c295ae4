from __future__ import annotations

from django.contrib import admin
from django.urls import path
from health_check.views import HealthCheckView as PlainHealthCheckView

from django_delayq.health import HealthCheckView
from tests.testapp import views

urlpatterns = [
    path("admin/", admin.site.urls),
    # django_delayq.health, registered as its docs say.
    path(
        "ht/",
        HealthCheckView.as_view(checks=["django_delayq.health.DelayQueue"]),
        name="health",
    ),
    path(
        "ht/ready/",
        HealthCheckView.as_view(checks=["django_delayq.health.Reachable"]),
        name="health-ready",
    ),
    # django-health-check's own view: nobody sees the details there.
    path(
        "ht/plain/",
        PlainHealthCheckView.as_view(checks=["django_delayq.health.DelayQueue"]),
        name="health-plain",
    ),
    # Async views calling the async API.
    path("async/schedule/", views.schedule_view),
    path("async/schedule-many/", views.schedule_many_view),
    path("async/cancel/", views.cancel_view),
    path("async/reschedule/", views.reschedule_view),
    path("async/retry/", views.retry_view),
    path("async/schedule-in-transaction/", views.schedule_in_transaction_view),
    path("async/enqueue/", views.enqueue_view),
]
