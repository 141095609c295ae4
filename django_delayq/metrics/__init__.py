"""Prometheus metrics, an optional extra: ``django-delayq[prometheus]``.

Nothing in this module imports prometheus-client: the package imports and
runs without it. :func:`enable` imports it, creates the counters and
histograms (:mod:`.counters`) and connects them to the task signals; until
then no receiver is connected, so sending a signal costs what it cost
before (``Signal.has_listeners`` is false), and the ``note_*`` functions
below, called where no signal exists (dead letters, the outbox), are one
test of a module global each.

The backlog gauges are read only when scraped (:mod:`.collector`); nothing
here sends a Redis command of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
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


def note_dead_letter(stream: str) -> None:
    """Count an entry of ``stream`` (a ready stream's key) dead-lettered."""
    if _counters is not None:
        _counters.dead_letters.labels(queue_of(stream)).inc()


def note_outbox_writes(queues: Iterable[str]) -> None:
    """Count outbox entries written, one per queue name given."""
    if _counters is not None:
        for queue in queues:
            _counters.outbox_writes.labels(queue).inc()


def note_outbox_replays(queues: Iterable[str]) -> None:
    """Count outbox entries replayed, one per queue name given."""
    if _counters is not None:
        for queue in queues:
            _counters.outbox_replays.labels(queue).inc()


def note_sweep(repairs: Mapping[str, int], *, skipped: bool) -> None:
    """Count a sweep pass and what it did, by kind (``reindexed``...)."""
    if _counters is not None:
        _counters.sweep(repairs, skipped=skipped)


def queue_of(stream: str) -> str:
    """The queue of a shard key such as ``delayq:{orders:3}:ready``."""
    tag = stream.rpartition("}")[0].rpartition("{")[2]
    queue, _, shard = tag.rpartition(":")
    return queue if queue and shard.isdigit() else "unknown"
