"""The suite's settings with a default database that reports itself as
MySQL (tests/backends), for ``manage.py check`` to refuse (``delayq.E019``).
"""

from __future__ import annotations

import os
import tempfile

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

DATABASES = {
    **DATABASES,
    "default": {
        "ENGINE": "tests.backends.mysql_vendor",
        "NAME": os.path.join(tempfile.gettempdir(), "delayq-tests-mysql-vendor"),
    },
}
