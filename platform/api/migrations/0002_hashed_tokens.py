"""API tokens stored hashed: several per user, each with a name, an optional expiry, a last-use and
a revocation time. Existing keys keep working: each one's SHA-256 and first 8 characters are
stored, then the plain key column is dropped."""

import hashlib

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def hash_existing_keys(apps, schema_editor):
    ApiToken = apps.get_model("api", "ApiToken")
    for pk, key in ApiToken.objects.values_list("pk", "key"):
        ApiToken.objects.filter(pk=pk).update(key_hash=hashlib.sha256(key.encode("utf-8")).hexdigest(),
                                              prefix=key[:8], name="default")


class Migration(migrations.Migration):

    dependencies = [
        ("api", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="apitoken",
            name="user",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="api_tokens",
                                    to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="name",
            field=models.CharField(blank=True, help_text="What the token is for (e.g. 'laptop', 'CI').", max_length=100),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="key_hash",
            field=models.CharField(editable=False, max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="prefix",
            field=models.CharField(default="", editable=False, help_text="The key's first characters.", max_length=8),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, help_text="Empty: never expires.", null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="last_used_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="revoked_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(hash_existing_keys, migrations.RunPython.noop),
        migrations.RemoveField(model_name="apitoken", name="key"),
        migrations.AlterField(
            model_name="apitoken",
            name="key_hash",
            field=models.CharField(editable=False, max_length=64, unique=True),
        ),
        migrations.AlterModelOptions(name="apitoken", options={"ordering": ["-created_at", "-id"]}),
    ]
