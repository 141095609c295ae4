"""The suite's settings, with the database reached through a PgBouncer in
transaction pooling mode (tests/db/test_pgbouncer.py): the
commands that test starts use them.

``DELAYQ_PGBOUNCER_HOST`` and ``DELAYQ_PGBOUNCER_PORT`` name the PgBouncer.
``DISABLE_SERVER_SIDE_CURSORS`` is deliberately left unset: Django needs it
for a project's own ``QuerySet.iterator()`` under transaction pooling, and
the test proves that django-delayq does not.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, DELAYQ

for _alias in DATABASES.values():
    _alias.update(
        HOST=os.environ["DELAYQ_PGBOUNCER_HOST"],
        PORT=os.environ["DELAYQ_PGBOUNCER_PORT"],
    )
    assert "DISABLE_SERVER_SIDE_CURSORS" not in _alias

# Retries a test can wait for: the first after about 0.1 s, not 2 s.
DELAYQ = {**DELAYQ, "RETRY_BACKOFF": 0.1}
