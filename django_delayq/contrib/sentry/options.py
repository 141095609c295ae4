"""What the Sentry integration does, and the options in force now.

The options live on the :class:`~.integration.DelayqIntegration` passed to
``sentry_sdk.init()``; without one, the defaults apply (the integration is
enabled by default, as Sentry's own framework integrations are). The
client is asked for the integration by its identifier, so this module
needs nothing of the others.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import sentry_sdk

#: The integration's identifier, in Sentry's registry of integrations.
IDENTIFIER = "django_delayq"
#: When a failed run is reported: on its final failure only, on each failed
#: attempt, or never.
FAILURE_POLICIES = ("final", "each_attempt", "never")


@dataclass(frozen=True)
class Options:
    """The integration's options, validated."""

    failures: str = "final"
    send_arguments: bool = False
    #: True for every periodic schedule, or the names of those monitored.
    monitors: bool | frozenset[str] = False

    def monitors_schedule(self, name: str) -> bool:
        if isinstance(self.monitors, bool):
            return self.monitors
        return name in self.monitors


DEFAULTS = Options()


def make_options(failures: object, send_arguments: object, monitors: object) -> Options:
    """Validate the integration's keyword arguments.

    :raises ValueError: naming the option and what it accepts.
    """
    if failures not in FAILURE_POLICIES:
        raise ValueError(
            f'DelayqIntegration(failures=...) must be "final", "each_attempt" '
            f'or "never"; got {failures!r}.'
        )
    if not isinstance(send_arguments, bool):
        raise ValueError(
            f"DelayqIntegration(send_arguments=...) must be True or False; "
            f"got {send_arguments!r}."
        )
    names: bool | frozenset[str]
    if isinstance(monitors, bool):
        names = monitors
    elif (
        isinstance(monitors, Collection)
        and not isinstance(monitors, str | bytes)
        and all(isinstance(name, str) and name for name in monitors)
    ):
        names = frozenset(monitors)
    else:
        raise ValueError(
            f"DelayqIntegration(monitors=...) must be True (every periodic "
            f"schedule), False, or a list of periodic schedules' names; got "
            f"{monitors!r}."
        )
    return Options(str(failures), send_arguments, names)


def active() -> Options | None:
    """The options in force, or None when nothing is to be sent: Sentry is
    not initialised in this process (or without a DSN), or the integration
    is disabled (``disabled_integrations``)."""
    client = sentry_sdk.get_client()
    # A client initialised without a DSN (nor a transport) sends nothing.
    if not client.is_active() or client.transport is None:
        return None
    integration = client.get_integration(IDENTIFIER)
    if integration is not None:
        options = getattr(integration, "options", None)
        return options if isinstance(options, Options) else DEFAULTS
    disabled = client.options.get("disabled_integrations") or ()
    if any(getattr(item, "identifier", None) == IDENTIFIER for item in disabled):
        return None
    return DEFAULTS
