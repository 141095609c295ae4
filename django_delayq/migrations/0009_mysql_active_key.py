from django.db import migrations

from django_delayq.migrations._operations import EnforceActiveKeyOnMySQL


class Migration(migrations.Migration):
    # One ALTER TABLE on MySQL and MariaDB; nothing elsewhere.

    dependencies = [
        ("django_delayq", "0008_periodic_schedules"),
    ]

    operations = [
        EnforceActiveKeyOnMySQL("delayedtask"),
    ]
