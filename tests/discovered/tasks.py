from __future__ import annotations

from django_delayq import task


@task(queue="reports")
def build_report(report_id: int) -> None:
    """Only reachable through autodiscovery of tasks modules."""
