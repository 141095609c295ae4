"""Django settings for the peers that run inside Django (procrastinate's
Django integration, django-tasks-db), in the harness and in their workers.

The database is the fresh one the harness made for the run, whose URL comes
in ``DELAYQ_PEER_BROKER_URL``; ``DELAYQ_PEER_DJANGO_APP`` names the one peer
installed, so that each database holds only that peer's tables. Read when
Django sets up, never at import of the peers' modules.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from benchmarks.peers.base import BROKER_URL_ENV, DJANGO_APP_ENV

SECRET_KEY = "benchmarks-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEBUG = False
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_url = urlsplit(os.environ[BROKER_URL_ENV])
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": _url.username or "postgres",
        "PASSWORD": _url.password or "",
        "HOST": _url.hostname or "127.0.0.1",
        "PORT": str(_url.port or 5432),
    }
}

_app = os.environ[DJANGO_APP_ENV]
if _app == "procrastinate":
    INSTALLED_APPS = ["procrastinate.contrib.django"]
    # The worker imports the task from here, not from autodiscovered
    # ``tasks`` modules (there is no app of ours to discover).
    PROCRASTINATE_AUTODISCOVER_MODULE_NAME = ""
    PROCRASTINATE_IMPORT_PATHS = ["benchmarks.peers.procrastinate_tasks"]
elif _app == "django-tasks-db":
    INSTALLED_APPS = ["django_tasks_db"]
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
else:
    raise RuntimeError(f"{DJANGO_APP_ENV}={_app!r}: no such Django peer")
