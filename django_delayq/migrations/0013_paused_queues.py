"""``PausedQueue``: the queues an operator paused (``delayq_queue pause``).

Expand only (docs/guide/upgrading.md): a new table, which an earlier
release running during the deploy never reads; its workers go on running
every queue until they are replaced.
"""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_delayq", "0012_expires_at"),
    ]

    operations = [
        migrations.CreateModel(
            name="PausedQueue",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True,
                        primary_key=True,
                        serialize=False,
                        verbose_name="ID",
                    ),
                ),
                (
                    "name",
                    models.CharField(max_length=64, unique=True, verbose_name="queue"),
                ),
                (
                    "paused_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, verbose_name="paused at"
                    ),
                ),
                (
                    "paused_by",
                    models.CharField(
                        blank=True, max_length=150, verbose_name="paused by"
                    ),
                ),
                (
                    "reason",
                    models.CharField(blank=True, max_length=200, verbose_name="reason"),
                ),
            ],
            options={
                "verbose_name": "paused queue",
                "verbose_name_plural": "paused queues",
                "ordering": ("name",),
            },
        ),
    ]
