"""Configuration: the ``DELAYQ`` setting, its schema, what can be wrong with
it, and how it reaches Redis.

Import what you need from here: :func:`get_settings` and the typed values it
returns. The modules below it import in one direction: ``schema`` imports
nothing of ours, ``redis_settings`` and ``problems`` validate against it,
``settings`` parses and caches. ``limits`` and ``middleware`` build what
the settings name (a task's limits, ``MIDDLEWARE``'s classes) and are
imported on their own.
"""

from __future__ import annotations

from .problems import find_problems
from .redis_settings import redact_url
from .schema import DEFAULT_QUEUE, DEFAULTS, DJANGO_REDIS_CACHE, MAX_TIME_LIMIT, Problem
from .settings import (
    QueueSettings,
    SentinelSettings,
    Settings,
    get_settings,
    in_test_run,
    parse,
    raw_settings,
    reset,
)

__all__ = [
    "DEFAULTS",
    "DEFAULT_QUEUE",
    "DJANGO_REDIS_CACHE",
    "MAX_TIME_LIMIT",
    "Problem",
    "QueueSettings",
    "SentinelSettings",
    "Settings",
    "find_problems",
    "get_settings",
    "in_test_run",
    "parse",
    "raw_settings",
    "redact_url",
    "reset",
]
