"""The Worker model, moved here from experiments: the same table, then renamed runner_worker."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runner", "0003_ray_hosts"), ("experiments", "0011_worker_moves_to_runner")]
    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name="Worker",
                fields=[
                    ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                    ("hostname", models.CharField(max_length=255, unique=True)),
                    ("pid", models.IntegerField(blank=True, null=True)),
                    ("queues", models.CharField(blank=True, max_length=255)),
                    ("concurrency", models.IntegerField(default=1)),
                    ("started_at", models.DateTimeField(default=django.utils.timezone.now)),
                    ("heartbeat_at", models.DateTimeField(default=django.utils.timezone.now)),
                ],
                options={"ordering": ["hostname"], "db_table": "experiments_worker"},
            ),
        ]),
        migrations.AlterModelTable(name="worker", table=None),
    ]
