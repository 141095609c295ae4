"""What the peers that run inside Django share: settings, setup, the worker CLI.

Django is configured once per process, so a process measures one Django peer
on one database: the command lines run every peer in a child process of its
own (:mod:`benchmarks.peers.child`).
"""

from __future__ import annotations

import os
import sys

from benchmarks.peers.base import BROKER_URL_ENV, DJANGO_APP_ENV

SETTINGS_MODULE = "benchmarks.peers.django_settings"


def django_env(url: str, app: str) -> dict[str, str]:
    """The environment under which Django runs ``app`` on the database ``url``."""
    return {
        BROKER_URL_ENV: url,
        DJANGO_APP_ENV: app,
        "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
    }


def setup_django(url: str, app: str) -> None:
    """Configure Django in this process for ``app`` on ``url``, and migrate."""
    from django.conf import settings

    wanted = django_env(url, app)
    if settings.configured:
        current = {key: os.environ.get(key) for key in wanted}
        if current != wanted:
            raise RuntimeError(
                f"Django is already set up in this process for {current}; "
                "run each Django peer in a process of its own "
                "(benchmarks.peers.child)"
            )
        return
    os.environ.update(wanted)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def manage(*args: str) -> list[str]:
    """argv of a management command, run by this interpreter."""
    return [sys.executable, "-m", "django", *args]
