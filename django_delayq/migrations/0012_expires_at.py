"""``DelayedTask.expires_at``: when a task not started yet is no longer run.

Expand only (docs/guide/upgrading.md): a nullable column with no default,
so an earlier release still running during the deploy, whose INSERT does
not name it, writes rows that never expire. Every supported database adds
such a column with one ``ALTER TABLE ... ADD COLUMN`` and no table rewrite
(there is no default to fill in): PostgreSQL in its catalog, SQLite in the
table's schema, MariaDB (10.6 and later) instantly. On PostgreSQL it waits
at most ``LOCK_TIMEOUT`` for the table's lock, as 0011 does.
"""

from django.db import migrations, models

from django_delayq.migrations._operations import AddFieldWithLockTimeout


class Migration(migrations.Migration):
    dependencies = [
        ("django_delayq", "0011_meta"),
    ]

    operations = [
        AddFieldWithLockTimeout(
            model_name="delayedtask",
            name="expires_at",
            field=models.DateTimeField(
                blank=True,
                help_text=(
                    "A task not started by this moment never runs: the worker "
                    "that claims it later cancels it. Empty: it never expires."
                ),
                null=True,
                verbose_name="expires at",
            ),
        ),
    ]
