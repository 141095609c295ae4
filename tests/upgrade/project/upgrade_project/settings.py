"""Settings of the upgrade test's project, which both releases run.

Nothing in it is specific to one release: only ``DELAYQ`` keys both know,
and the project's own app. The database and Redis come from the
environment the test sets (``DELAYQ_UPGRADE_*``).
"""

from __future__ import annotations

import os

SECRET_KEY = "upgrade-test-only-not-secret"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django_delayq",
    "upgrade_runs",
]

if os.environ["DELAYQ_UPGRADE_DB"] == "sqlite":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ["DELAYQ_UPGRADE_DB_NAME"],
            "OPTIONS": {
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF",
            },
        }
    }
elif os.environ["DELAYQ_UPGRADE_DB"] == "mariadb":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.mysql",
            "NAME": os.environ["DELAYQ_UPGRADE_DB_NAME"],
            "USER": os.environ["DELAYQ_UPGRADE_MARIADB_USER"],
            "HOST": os.environ["DELAYQ_UPGRADE_MARIADB_HOST"],
            "PORT": os.environ["DELAYQ_UPGRADE_MARIADB_PORT"],
            "CONN_MAX_AGE": 60,
            "OPTIONS": {"charset": "utf8mb4"},
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ["DELAYQ_UPGRADE_DB_NAME"],
            "USER": "postgres",
            "HOST": os.environ["DELAYQ_UPGRADE_PG_HOST"],
            "PORT": os.environ["DELAYQ_UPGRADE_PG_PORT"],
            "CONN_MAX_AGE": 60,
        }
    }

DELAYQ = {
    "REDIS_URL": os.environ["DELAYQ_UPGRADE_REDIS_URL"],
    "QUEUES": {"upgrade": {"shards": 2}},
    # Entries an old worker read but did not start before its stop are
    # taken over by the new workers after this long.
    "VISIBILITY_TIMEOUT": 3.0,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "stamped": {"format": "%(asctime)s.%(msecs)03d %(threadName)s %(message)s"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "stamped"}},
    "loggers": {"django_delayq": {"handlers": ["console"], "level": "WARNING"}},
}
