"""The Worker model moves to the runner app (runner/0004 takes over its table)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("experiments", "0010_sample_text_trigram")]
    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[migrations.DeleteModel(name="Worker")]),
    ]
