from __future__ import annotations

from django.db import models


class Order(models.Model):
    status = models.CharField(max_length=16, default="unpaid")


class Ledger(models.Model):
    """One row per execution of a recording task, written in its transaction."""

    key = models.CharField(max_length=100)
    pid = models.IntegerField()
    at = models.DateTimeField()


class Run(models.Model):
    """One run of a task under limits: when it started and ended."""

    key = models.CharField(max_length=100)
    pid = models.IntegerField()
    started = models.FloatField()
    ended = models.FloatField()
