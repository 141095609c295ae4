"""Django settings for the benchmarks; the harness fills in the servers."""

from __future__ import annotations

import os

SECRET_KEY = "benchmarks-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_delayq",
    "benchmarks.harness.benchapp",
]

_db = os.environ.get("DELAYQ_BENCH_DB", "sqlite")
if _db == "sqlite":
    _database = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DELAYQ_BENCH_SQLITE", "/tmp/delayq-bench.sqlite3"),
    }
elif _db == "mariadb":
    # The server's defaults, as a shop runs them (tools/servers/mariadb.py).
    _database = {
        "ENGINE": "django.db.backends.mysql",
        "NAME": os.environ.get("DELAYQ_MARIADB_NAME", "delayq"),
        "USER": os.environ.get("DELAYQ_MARIADB_USER", "delayq"),
        "HOST": os.environ.get("DELAYQ_MARIADB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("DELAYQ_MARIADB_PORT", "3306"),
        "OPTIONS": {"charset": "utf8mb4"},
    }
else:
    _database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("DELAYQ_PG_NAME", "postgres"),
        "USER": os.environ.get("DELAYQ_PG_USER", "postgres"),
        "HOST": os.environ.get("DELAYQ_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("DELAYQ_PG_PORT", "5432"),
    }
DATABASES = {"default": _database}
DELAYQ = {
    "REDIS_URL": os.environ.get("DELAYQ_REDIS_URL", "redis://127.0.0.1:6379/0"),
    # benchmarks.scenarios.cluster runs the same scenarios on a Redis Cluster.
    "REDIS_CLUSTER": os.environ.get("DELAYQ_REDIS_CLUSTER") == "1",
    "QUEUES": {"default": {"shards": int(os.environ.get("DELAYQ_BENCH_SHARDS", "1"))}},
}

# benchmarks.scenarios.periodic: that many schedules of the noop task, every second.
if os.environ.get("DELAYQ_BENCH_PERIODIC"):
    DELAYQ["PERIODIC"] = {
        f"bench-{number:05d}": {
            "task": "benchmarks.harness.benchapp.tasks.noop",
            "every": 1,
            "args": [number],
        }
        for number in range(int(os.environ["DELAYQ_BENCH_PERIODIC"]))
    }

# benchmarks.scenarios.limits: the queue of its tasks under a limit
# (benchapp/limited_tasks.py, registered only then too).
if os.environ.get("DELAYQ_BENCH_LIMITS"):
    DELAYQ["QUEUES"]["limited"] = {"shards": 1}
