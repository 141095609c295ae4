"""The task's metadata (``schedule(..., meta=...)``).

A nullable column without a default: NULL is "no metadata", so the rows
that processes of the previous release insert during a deploy (they do not
name the column) are valid as they are. On PostgreSQL adding it changes
the catalog only (no table rewrite), but takes the table's exclusive lock
for a moment: it waits at most ``LOCK_TIMEOUT`` for the transactions on
the table to end, then fails with "lock timeout" and can be run again,
instead of queueing every ``schedule()`` behind it meanwhile. On SQLite it
is an ``ALTER TABLE ... ADD COLUMN``.
"""

from django.db import migrations, models

from django_delayq.migrations._operations import AddFieldWithLockTimeout


class Migration(migrations.Migration):
    dependencies = [
        ("django_delayq", "0010_runtime_schedules"),
    ]

    operations = [
        AddFieldWithLockTimeout(
            model_name="delayedtask",
            name="meta",
            field=models.JSONField(
                blank=True,
                help_text=(
                    "What the caller and the middleware attached to the task (a "
                    "tenant, a request id), for the middleware of its runs; not "
                    "arguments."
                ),
                null=True,
                verbose_name="metadata",
            ),
        ),
    ]
