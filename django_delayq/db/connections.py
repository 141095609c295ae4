"""Keeping a long-running loop's database connections healthy and reused.

Django closes connections at the end of each request, after ``CONN_MAX_AGE``
(default 0: one connection per request). A worker is not a request: running
each task on a fresh connection costs a connect (several milliseconds on
PostgreSQL) per task, more than the task itself. So between tasks we drop a
connection only when it is broken, was left in a transaction mode we did not
expect, or outlived a *positive* ``CONN_MAX_AGE``; with 0 (or None) a worker
keeps its connection, as Django's own long-running commands do.
"""

from __future__ import annotations

import time

from django.db import connections


def recycle_connections() -> None:
    """Close this thread's connections that broke or outlived CONN_MAX_AGE."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is None:
            continue
        if connection.get_autocommit() != connection.settings_dict["AUTOCOMMIT"]:
            connection.close()  # someone left autocommit off: don't trust it
            continue
        if connection.errors_occurred:
            # A statement failed since the last check: the server may be gone
            # (restarted, session terminated). Probe before reusing it.
            if not connection.is_usable():
                connection.close()
                continue
            connection.errors_occurred = False
        max_age = connection.settings_dict.get("CONN_MAX_AGE") or 0
        if (
            max_age > 0
            and connection.close_at is not None
            and time.monotonic() >= connection.close_at
        ):
            connection.close()
