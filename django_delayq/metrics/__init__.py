"""Prometheus metrics, an optional extra: ``django-delayq[prometheus]``.

Nothing in this module imports prometheus-client: the package imports and
runs without it. :func:`enable` imports it, creates the counters and
histograms (:mod:`.counters`) and connects them to the package's signals
(:mod:`django_delayq.signals`: the tasks', and the machinery's dead
letters, outbox writes and replays, sweep passes). That is the only way
metrics attach: no other module of the package calls this one, and until
:func:`enable` no receiver is connected, so sending a signal costs what it
cost before (``Signal.has_listeners`` is false).

The backlog gauges are read only when scraped (:mod:`.collector`); nothing
here sends a Redis command of its own.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..exceptions import MetricsUnavailable

if TYPE_CHECKING:
    from .counters import Counters

#: What to install, for the messages that ask for it.
INSTALL = "pip install 'django-delayq[prometheus]'"

_counters: Counters | None = None
_lock = threading.Lock()


def enable() -> Counters:
    """Create the metrics of this process (once) and start counting.

    :raises MetricsUnavailable: prometheus-client is not installed.
    """
    global _counters
    with _lock:
        if _counters is None:
            try:
                import prometheus_client  # noqa: F401
            except ImportError as exc:
                raise MetricsUnavailable(
                    f"metrics need prometheus-client, which is not installed: {INSTALL}"
                ) from exc
            from .counters import Counters

            _counters = Counters()
        return _counters


def enabled() -> bool:
    """Whether :func:`enable` was called in this process."""
    return _counters is not None
