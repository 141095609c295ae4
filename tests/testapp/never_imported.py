"""A module of an installed app that nothing imports.

A forged task name pointing here must not make a worker import it: importing
runs module code, which is all this module has.
"""

from __future__ import annotations

import os

from tests.testapp.django_tasks import task

os.environ["DELAYQ_TEST_NEVER_IMPORTED_RAN"] = "1"


@task
def looks_like_a_task() -> None:
    """A genuine task, had the module been imported."""
