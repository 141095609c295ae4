from __future__ import annotations

from django.db import models


class Order(models.Model):
    status = models.CharField(max_length=16, default="unpaid")
