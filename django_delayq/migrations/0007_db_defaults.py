"""Database defaults for the columns 0002, 0005 and 0006 added.

Those migrations first gave their columns defaults in Python only, so during
a deploy (``migrate`` first, then the processes restart) every
``schedule()`` of a process still running the earlier version, which
inserts rows without them, was refused with a NOT NULL violation. They now
add each column with its database default in the same statement; this
migration gives the default to databases that ran them before, and is
harmless where the default is there already. On PostgreSQL it changes the
catalog only (no table rewrite), but each change takes the table's
exclusive lock for a moment: it waits at most ``LOCK_TIMEOUT`` for the
transactions on the table to end (a worker's group can run as long as its
tasks), then fails with "lock timeout" and can be run again, instead of
queueing every ``schedule()`` behind it meanwhile.
"""

from django.db import migrations

from django_delayq.migrations._operations import SetDatabaseDefault


class Migration(migrations.Migration):
    dependencies = [
        ("django_delayq", "0006_priority"),
    ]

    operations = [
        SetDatabaseDefault("delayedtask", "claim_entry"),
        SetDatabaseDefault("delayedtask", "worker_ids"),
        SetDatabaseDefault("delayedtask", "priority"),
    ]
