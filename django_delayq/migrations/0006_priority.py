from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_delayq", "0005_worker_ids"),
    ]

    operations = [
        migrations.AddField(
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
    ]
