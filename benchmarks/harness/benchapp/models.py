from __future__ import annotations

from django.db import models


class BenchRow(models.Model):
    """The one row that the ``write_row`` benchmark task inserts."""

    n = models.BigIntegerField()

    def __str__(self) -> str:
        return f"BenchRow({self.n})"
