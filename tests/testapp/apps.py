from __future__ import annotations

import os

from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        if os.environ.get("DELAYQ_TEST_LIMITED"):
            # The processes the tests of limits start (see limited.py).
            from tests.testapp import limited  # noqa: F401
        if os.environ.get("DELAYQ_TEST_CELERY"):
            # The worker processes the Celery kit's tests start.
            from tests.testapp import celery_style  # noqa: F401
