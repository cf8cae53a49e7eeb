"""MetricPoint.value may be NULL, meaning NaN: a diverged run's metrics are stored, not dropped
(SQLite cannot store NaN itself; +inf and -inf are stored as they are on both back ends)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0004_datasets'),
    ]

    operations = [
        migrations.AlterField(
            model_name='metricpoint',
            name='value',
            field=models.FloatField(help_text='The value; +inf and -inf as themselves, empty (NULL) for NaN.', null=True),
        ),
    ]
