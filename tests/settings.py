"""Settings for the test suite.

``DELAYQ_TEST_DB`` picks the database: ``sqlite`` (default), ``postgres`` or
``mariadb``. The conftest starts a private redis-server (and PostgreSQL or
MariaDB) and points the settings at them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from typing import Any

import django

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
    "health_check",
    "tests.testapp",
    "tests.discovered",
]
if importlib.util.find_spec("django_celery_beat") is not None:
    # The Django 5.2 leg: delayq_import_beat reads a real django-celery-beat
    # database (tests/contrib/test_celery_beat_import.py).
    INSTALLED_APPS.append("django_celery_beat")

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
if TEST_DB not in ("sqlite", "postgres", "mariadb"):
    raise RuntimeError(
        f"DELAYQ_TEST_DB must be sqlite, postgres or mariadb, not {TEST_DB!r}"
    )

# Commands run as subprocesses by the acceptance tests use the test session's
# database and Redis: DELAYQ_TEST_SHARED_DB names the database (a file for
# SQLite), the DELAYQ_PG_*, DELAYQ_MARIADB_* and DELAYQ_REDIS_URL variables
# the servers.
SHARED_DB = os.environ.get("DELAYQ_TEST_SHARED_DB")

if TEST_DB == "sqlite":
    # A file, not :memory:, so that subprocesses can share it; WAL lets them
    # read while another process writes.
    _sqlite_file = os.path.join(
        tempfile.gettempdir(), f"delayq-tests-{os.getpid()}.sqlite3"
    )
    _replica_file = os.path.join(
        tempfile.gettempdir(), f"delayq-tests-{os.getpid()}-replica.sqlite3"
    )
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": SHARED_DB or _sqlite_file,
            "TEST": {"NAME": _sqlite_file},
            "OPTIONS": {
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF",
            },
        },
        # A read replica that never catches up (tests/support/routers.py): created
        # only for the tests that ask for it.
        "replica": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _replica_file,
            "TEST": {"NAME": _replica_file},
        },
    }
elif TEST_DB == "mariadb":
    # For the test session the conftest fills in the server it starts. The
    # server's defaults are a shop's: REPEATABLE READ, utf8mb4 with its
    # case-insensitive collation (tools/servers/mariadb.py).
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.mysql",
            "NAME": SHARED_DB or "delayq",
            "USER": os.environ.get("DELAYQ_MARIADB_USER", "delayq"),
            "HOST": os.environ.get("DELAYQ_MARIADB_HOST", "127.0.0.1"),
            "PORT": os.environ.get("DELAYQ_MARIADB_PORT", "0"),
            # REPEATABLE READ, the server's default, rather than Django's
            # READ COMMITTED: the harder case for fencing and the planner
            # (a transaction reads from a snapshot).
            "OPTIONS": {"charset": "utf8mb4", "isolation_level": "repeatable read"},
            "TEST": {"CHARSET": "utf8mb4"},
        },
    }
    if not SHARED_DB:
        # Not for the commands a test starts: Django's MySQL checks connect
        # to every alias, and the replica's database exists only for the
        # tests that ask for it.
        DATABASES["replica"] = {**DATABASES["default"], "NAME": "delayq_replica"}
else:
    # For the test session the conftest fills in the server it starts.
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": SHARED_DB or "delayq",
            "USER": os.environ.get("DELAYQ_PG_USER", "postgres"),
            "HOST": os.environ.get("DELAYQ_PG_HOST", "127.0.0.1"),
            "PORT": os.environ.get("DELAYQ_PG_PORT", "0"),
        },
    }
    # A read replica that never catches up (tests/support/routers.py): another
    # database of the same server, created only for the tests that ask.
    DATABASES["replica"] = {**DATABASES["default"], "NAME": "delayq_replica"}

# The conftest points the session at its private redis-server. The suite
# keeps the plain prefix in its test run (TEST_KEY_PREFIX): the commands it
# starts as subprocesses are no test run, and it reads their keys by name.
# A project's own test run gets a namespace of its own instead.
DELAYQ: dict[str, Any] = {
    "REDIS_URL": os.environ.get("DELAYQ_REDIS_URL", "redis://127.0.0.1:1/0"),
    "QUEUES": {"orders": {"shards": 4}, "reports": {}},
    "TEST_KEY_PREFIX": "delayq",
}
# The processes the tests of limits start (tests/testapp/limited.py).
if os.environ.get("DELAYQ_TEST_LIMITED"):
    DELAYQ["QUEUES"]["limited"] = json.loads(os.environ["DELAYQ_TEST_LIMITED"])
# Periodic schedules of the commands a test starts as subprocesses, as JSON
# (tests/acceptance/commands/test_periodic_processes.py).
if "DELAYQ_TEST_PERIODIC" in os.environ:
    DELAYQ["PERIODIC"] = json.loads(os.environ["DELAYQ_TEST_PERIODIC"])
# Middleware of the worker processes a test starts, as JSON
# (tests/acceptance/commands/test_middleware_processes.py).
if "DELAYQ_TEST_MIDDLEWARE" in os.environ:
    DELAYQ["MIDDLEWARE"] = json.loads(os.environ["DELAYQ_TEST_MIDDLEWARE"])
# The grace period of a cancel in the worker processes a test starts
# (tests/supervisor/test_cancel_running_processes.py).
if "DELAYQ_TEST_CANCEL_GRACE" in os.environ:
    DELAYQ["CANCEL_GRACE"] = float(os.environ["DELAYQ_TEST_CANCEL_GRACE"])

# Django's Tasks framework (django.tasks on Django 6, the django-tasks
# backport on 5.2) on django-delayq. "elsewhere" is another backend: a worker
# must never run tasks declared for it.
_TASKS_PACKAGE = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
TASKS = {
    "default": {
        "BACKEND": "django_delayq.backends.DelayQueueBackend",
        "QUEUES": ["default", "orders", "reports"],
    },
    "non_atomic": {
        "BACKEND": "django_delayq.backends.DelayQueueBackend",
        "OPTIONS": {"atomic": False, "max_attempts": 1},
    },
    "elsewhere": {"BACKEND": f"{_TASKS_PACKAGE}.backends.dummy.DummyBackend"},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_delayq": {"handlers": ["console"], "level": "WARNING"}},
}

# Sentry in the worker processes a test starts, its envelopes written to the
# file named (tests/contrib/sentry/test_worker_process.py).
if "DELAYQ_TEST_SENTRY" in os.environ:
    import sentry_sdk

    from tests.support.sentry import DSN, ToFile

    sentry_sdk.init(dsn=DSN, transport=ToFile(os.environ["DELAYQ_TEST_SENTRY"]))

# OpenTelemetry's SDK in the worker processes a test starts, its spans
# written to the file named (tests/tracing/test_worker_process.py).
if "DELAYQ_TEST_OTEL" in os.environ:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from tests.support.otel import ToFile

    _provider = TracerProvider()
    _provider.add_span_processor(
        SimpleSpanProcessor(ToFile(os.environ["DELAYQ_TEST_OTEL"]))
    )
    trace.set_tracer_provider(_provider)
