"""Settings of the example shop: a SQLite file (or the database server
``SHOP_DATABASE_URL`` names), and Redis from ``DELAYQ_REDIS_URL``."""

from __future__ import annotations

import logging
import os
import urllib.parse
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_delayq",
    "shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"
ASGI_APPLICATION = "example_project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

#: The engines SHOP_DATABASE_URL may name, by its scheme.
SERVER_ENGINES = {
    "mariadb": "django.db.backends.mysql",
    "mysql": "django.db.backends.mysql",
    "postgres": "django.db.backends.postgresql",
    "postgresql": "django.db.backends.postgresql",
}


def server_database(url: str) -> dict[str, object]:
    """The shop on a database server, e.g.
    ``SHOP_DATABASE_URL=mariadb://shop:secret@127.0.0.1:3306/shop``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in SERVER_ENGINES or not parts.path.strip("/"):
        raise ImproperlyConfigured(
            f"SHOP_DATABASE_URL={url!r}: give scheme://user:password@host:port/"
            f"name with a scheme among {', '.join(SERVER_ENGINES)}, or leave it "
            f"unset for the SQLite file"
        )
    engine = SERVER_ENGINES[parts.scheme]
    return {
        "ENGINE": engine,
        "NAME": parts.path.strip("/"),
        "USER": urllib.parse.unquote(parts.username or ""),
        "PASSWORD": urllib.parse.unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        # Every character of a name or a task's arguments (MariaDB's
        # "utf8" is three bytes).
        "OPTIONS": {"charset": "utf8mb4"} if engine.endswith("mysql") else {},
    }


if os.environ.get("SHOP_DATABASE_URL"):
    DATABASES = {"default": server_database(os.environ["SHOP_DATABASE_URL"])}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("SHOP_DB", BASE_DIR / "db.sqlite3"),
            # Web server and worker share the file: wait for locks instead of
            # failing with "database is locked", and let readers run alongside
            # a writer (WAL).
            "OPTIONS": {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL"},
        }
    }

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The one setting django-delayq needs is where Redis is; the queues are
# optional (each task names its queue, and every command serves them all).
DELAYQ = {
    "REDIS_URL": os.environ.get("DELAYQ_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "QUEUES": {"orders": {"shards": 2}, "coupons": {"shards": 1}},
    # Workers heartbeat every third of it; the browser tests shorten it to
    # watch a heartbeat being renewed while a worker waits for work.
    "VISIBILITY_TIMEOUT": float(os.environ.get("SHOP_VISIBILITY_TIMEOUT", "300")),
}


def _seconds(variable: str, default: int) -> int:
    """A whole number of seconds (>= 0) from the environment."""
    raw = os.environ.get(variable, str(default))
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ImproperlyConfigured(
            f"{variable} must be a whole number of seconds (0 or more), not "
            f"{raw!r}: e.g. {variable}={default}"
        )
    return value


#: Seconds an unpaid order waits before it is cancelled; the order form
#: offers it as the default (`make example` makes it short for the demo).
SHOP_ORDER_CANCEL_DELAY = _seconds("SHOP_ORDER_CANCEL_DELAY", 15 * 60)
#: How long a coupon stays valid, and how long before it expires its holder
#: is reminded.
SHOP_COUPON_LIFETIME = _seconds("SHOP_COUPON_LIFETIME", 7 * 86400)
SHOP_COUPON_REMIND_BEFORE = _seconds("SHOP_COUPON_REMIND_BEFORE", 86400)


def _not_a_poll(record: logging.LogRecord) -> bool:
    """Keep the page's once-a-second state requests out of the server log."""
    return "/state.json" not in record.getMessage() or record.levelno > logging.INFO


LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "not_a_poll": {"()": "django.utils.log.CallbackFilter", "callback": _not_a_poll}
    },
    "formatters": {
        "server": {
            "()": "django.utils.log.ServerFormatter",
            "format": "[{server_time}] {message}",
            "style": "{",
        }
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler"},
        "server": {
            "class": "logging.StreamHandler",
            "formatter": "server",
            "filters": ["not_a_poll"],
        },
    },
    "loggers": {
        "django_delayq": {"handlers": ["console"], "level": "INFO"},
        "shop": {"handlers": ["console"], "level": "INFO"},
        "django.server": {"handlers": ["server"], "level": "INFO", "propagate": False},
    },
}
