from __future__ import annotations

from django.db import models


class Run(models.Model):
    """One execution of ``record_run``: which task, when it started, and
    which release's worker ran it."""

    key = models.CharField(max_length=64, db_index=True)
    started_at = models.DateTimeField()
    release = models.CharField(max_length=8)
    pid = models.IntegerField()
