"""``/metrics`` for the web process: the backlog gauges and this process's
counters, as a Django view.

Importing this module enables metrics in the process (the counters of the
tasks it schedules and cancels) and needs prometheus-client. Only staff
users, or a scraper sending ``Authorization: Bearer <token>`` with the
token of the ``DELAYQ_METRICS_TOKEN`` setting, may read it::

    # urls.py
    from django_delayq.metrics.views import metrics_view

    urlpatterns = [..., path("delayq/metrics", metrics_view)]
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from . import enable

# First: without prometheus-client this raises MetricsUnavailable, which
# says what to install, instead of a bare ImportError.
enable()

from prometheus_client import REGISTRY, CollectorRegistry  # noqa: E402
from prometheus_client.exposition import choose_encoder  # noqa: E402
from prometheus_client.metrics_core import Metric  # noqa: E402
from prometheus_client.multiprocess import MultiProcessCollector  # noqa: E402
from prometheus_client.registry import Collector  # noqa: E402

from ..exceptions import MetricsUnavailable  # noqa: E402
from .collector import BacklogCollector  # noqa: E402
from .server import check_private  # noqa: E402

logger = logging.getLogger(__name__)


class _Exposed(Collector):
    """This process's metrics (or, in prometheus-client's multi-process
    mode, every process's), then the backlog gauges."""

    def __init__(self) -> None:
        self.backlog = BacklogCollector()

    def collect(self) -> Iterator[Metric]:
        yield from _process_metrics().collect()
        yield from self.backlog.collect()


def _process_metrics() -> Collector:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # As under gunicorn's workers: the sum of the processes' files.
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return registry
    return REGISTRY


_exposed = _Exposed()


def allowed(request: HttpRequest) -> bool:
    """A staff user, or the bearer of ``DELAYQ_METRICS_TOKEN``."""
    user = getattr(request, "user", None)
    if user is not None and user.is_active and user.is_staff:
        return True
    token: str | None = getattr(settings, "DELAYQ_METRICS_TOKEN", None)
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return bool(
        token
        and scheme.lower() == "bearer"
        and hmac.compare_digest(given.strip().encode(), token.encode())
    )


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The metrics in Prometheus' text format; 403 unless :func:`allowed`."""
    if not allowed(request):
        return HttpResponse(
            "Staff only, or Authorization: Bearer <DELAYQ_METRICS_TOKEN>.\n",
            status=403,
            content_type="text/plain",
        )
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        # Read on each scrape: refused while another user could plant the
        # files summed into it, as the commands refuse it.
        try:
            check_private(Path(directory))
        except MetricsUnavailable as exc:
            logger.error("django-delayq: metrics not served: %s", exc)
            return HttpResponse(f"{exc}\n", status=503, content_type="text/plain")
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(_exposed), content_type=content_type)
