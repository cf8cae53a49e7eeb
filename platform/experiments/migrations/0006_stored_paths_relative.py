"""Stored configs name `model.path`, `data.train_path` and `data.eval_path` relative to their first
root (experiments.configs.stored), so no server directory reaches users through a config. Rows
stored before held the resolved absolute paths: rewrite those that lie inside the first root (as the
settings are now) the same way. The relative value starts in that root, so it names the same file;
a path elsewhere (another root, or one the worker will refuse) stays as it is. Reversing leaves the
rows relative: they are valid either way."""

from django.db import migrations


def relative_paths(apps, schema_editor):
    from experiments.configs import with_stored_paths

    for model_name in ("Experiment", "ConfigVersion", "Run"):
        model = apps.get_model("experiments", model_name)
        for pk, config in model.objects.values_list("pk", "config").iterator():
            rewritten = with_stored_paths(config)
            if rewritten != config:
                model.objects.filter(pk=pk).update(config=rewritten)


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0005_metric_nonfinite'),
    ]

    operations = [
        migrations.RunPython(relative_paths, migrations.RunPython.noop, elidable=True),
    ]
