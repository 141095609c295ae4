"""Tasks the tests schedule."""

from __future__ import annotations

from django_delayq import task


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue="orders", max_attempts=5)
def order_cancel(order_id: int) -> None:
    """Stands in for a shop's "cancel the unpaid order" task."""


@task(name="reminders.send")
def send_reminder(user_id: int, *, text: str = "") -> None:
    """Registered under an explicit name."""
