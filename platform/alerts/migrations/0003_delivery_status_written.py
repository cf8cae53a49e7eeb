from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("alerts", "0002_rule_for_steps_and_stuck"),
    ]

    operations = [
        migrations.AlterField(
            model_name="alertdelivery",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("sent", "Sent"),
                    ("written", "Written"),
                    ("failed", "Failed"),
                    ("rate_limited", "Rate Limited"),
                ],
                db_index=True,
                default="pending",
                max_length=16,
            ),
        ),
    ]
