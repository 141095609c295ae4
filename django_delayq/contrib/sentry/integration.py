"""``DelayqIntegration``: the options passed to ``sentry_sdk.init()``.

The receivers that report to Sentry are connected when the app loads
(:mod:`.receivers`), whether or not the integration is passed: without it
the defaults apply, as Sentry enables its framework integrations by
default. This module is imported where ``sentry_sdk.init()`` is called,
often the settings, so it imports nothing that needs the apps loaded.
"""

from __future__ import annotations

from collections.abc import Iterable

from sentry_sdk.integrations import Integration

from .failures import add_event_processor
from .options import IDENTIFIER, make_options


class DelayqIntegration(Integration):
    """Report django-delayq's failed runs to Sentry, and optionally check
    periodic schedules' ticks in to Sentry's Cron Monitors.

    :param failures: ``"final"`` (default): one event when a task fails for
        good; ``"each_attempt"``: one event per failed attempt, retried or
        final; ``"never"``: none.
    :param send_arguments: whether events carry the task's ``args`` and
        ``kwargs`` (default False: they may hold personal data or secrets).
    :param monitors: True to check in the ticks of every periodic schedule,
        a list of schedule names for those only, or False (default).
    :raises ValueError: for an option out of those.
    """

    identifier = IDENTIFIER

    def __init__(
        self,
        *,
        failures: str = "final",
        send_arguments: bool = False,
        monitors: bool | Iterable[str] = False,
    ) -> None:
        self.options = make_options(failures, send_arguments, monitors)

    @staticmethod
    def setup_once() -> None:
        # The receivers are connected by the app (they need the models,
        # which may not be loaded yet); the filter of logged failures must
        # be in place before the first event.
        add_event_processor()
