"""Settings of the fault scenarios' subprocesses.

The test suite's settings, with ``DELAYQ`` replaced by the JSON object in
``DELAYQ_FAULTS_DELAYQ``, so the commands a scenario starts see exactly the
``DELAYQ`` of the test process (its private redis-server, a short visibility
timeout, fast retries...).
"""

from __future__ import annotations

import json
import os

from tests.settings import *  # noqa: F403

if "DELAYQ_FAULTS_DELAYQ" in os.environ:
    DELAYQ = json.loads(os.environ["DELAYQ_FAULTS_DELAYQ"])

# Persistent connections, as long-running workers are usually deployed: with
# Django's default (0) a worker opens a new PostgreSQL connection per task.
# It also makes the database faults harder: connections broken by a server
# restart must be noticed and replaced, not just dropped after each task.
DATABASES["default"]["CONN_MAX_AGE"] = 60  # noqa: F405

# Timestamps in the commands' logs, for reading interleavings after a failure.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "stamped": {"format": "%(asctime)s.%(msecs)03d %(threadName)s %(message)s"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "stamped"}},
    "loggers": {"django_delayq": {"handlers": ["console"], "level": "WARNING"}},
}
