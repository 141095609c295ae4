"""Database defaults for the columns 0002, 0005 and 0006 added.

Those columns had defaults in Python only, so during a deploy (``migrate``
first, then the processes restart) every ``schedule()`` of a process still
running the earlier version, which inserts rows without them, was refused
with a NOT NULL violation. A default in the database fills them in. On
PostgreSQL this changes the catalog only (no table rewrite, no long lock).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_delayq", "0006_priority"),
    ]

    operations = [
        migrations.AlterField(
            model_name="delayedtask",
            name="claim_entry",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text=(
                    "The ready-stream entry whose delivery started the current "
                    "attempt; only that entry may take the attempt over from a "
                    "dead worker."
                ),
                max_length=64,
                verbose_name="claiming stream entry",
            ),
        ),
        migrations.AlterField(
            model_name="delayedtask",
            name="priority",
            field=models.SmallIntegerField(
                db_default=0,
                default=0,
                help_text=(
                    "From -100 to 100: among due tasks, a higher band (above 0, "
                    "0, below 0) starts first."
                ),
                verbose_name="priority",
            ),
        ),
        migrations.AlterField(
            model_name="delayedtask",
            name="worker_ids",
            field=models.JSONField(
                blank=True,
                db_default=models.Value([], output_field=models.JSONField()),
                default=list,
                help_text=(
                    "The worker thread (host:pid:id-thread) that claimed each "
                    "attempt, oldest first."
                ),
                verbose_name="workers",
            ),
        ),
    ]
