"""The task both releases schedule and run."""

from __future__ import annotations

import os

from django.utils import timezone

from django_delayq import task


@task(queue="upgrade", atomic=False)
def record_run(key: str) -> None:
    """Note this execution. Not atomic: a second execution of a task would
    leave a second row, whatever became of its outcome."""
    from .models import Run

    Run.objects.create(
        key=key,
        started_at=timezone.now(),
        release=os.environ["DELAYQ_UPGRADE_RELEASE"],
        pid=os.getpid(),
    )
