"""Sentry for django-delayq (``pip install django-delayq[sentry]``).

* :mod:`.options`: the integration's options, and those in force;
* :mod:`.failures`: failed runs as events, each once;
* :mod:`.monitors`: periodic schedules' ticks as cron check-ins;
* :mod:`.integration`: ``DelayqIntegration``, passed to ``sentry_sdk.init()``;
* :mod:`.receivers`: the receivers, connected when the app loads.

The only package of django-delayq that imports ``sentry_sdk``.
"""

from __future__ import annotations

from .integration import DelayqIntegration

__all__ = ["DelayqIntegration"]
