"""The benchmark task registered on procrastinate's Django app.

Imported by the worker (``PROCRASTINATE_IMPORT_PATHS``) and by the client,
both after Django is set up.
"""

from __future__ import annotations

from procrastinate.contrib.django import app

from benchmarks.peers.task import record

record_task = app.task(name="record")(record)
