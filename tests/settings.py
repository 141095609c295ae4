"""Settings for the test suite.

``DELAYQ_TEST_DB`` picks the database: ``sqlite`` (default) or ``postgres``.
The conftest starts a private redis-server (and PostgreSQL) and points the
settings at them.
"""

from __future__ import annotations

import os

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_delayq",
    "tests.testapp",
    "tests.discovered",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

TEST_DB = os.environ.get("DELAYQ_TEST_DB", "sqlite")
if TEST_DB not in ("sqlite", "postgres"):
    raise RuntimeError(f"DELAYQ_TEST_DB must be sqlite or postgres, not {TEST_DB!r}")

# For postgres the conftest fills in HOST/PORT of the server it starts.
DATABASES = {
    "default": (
        {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
        if TEST_DB == "sqlite"
        else {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "delayq",
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": "0",
        }
    )
}

# The conftest replaces this URL with the private server's.
DELAYQ = {
    "REDIS_URL": "redis://127.0.0.1:1/0",
    "QUEUES": {"orders": {"shards": 4}, "reports": {}},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_delayq": {"handlers": ["console"], "level": "WARNING"}},
}
