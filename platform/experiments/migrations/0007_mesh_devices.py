"""The device lists moved from the async section to the mesh section (`async.train_devices` ->
`mesh.train_devices`, `async.rollout_devices` -> `mesh.rollout_devices`), and configs gained a
`mesh` section. Rewrite the stored configs of experiments, their versions and runs to what they
meant:

  - the old lists were used only with async.enabled: training split every micro-batch over the
    train devices (data parallel), generation over the rollout devices. So with async.enabled a
    listed pair becomes mesh.train_devices with mesh.data = their count, and mesh.rollout_devices
    (mesh.rollout_tensor 1);
  - without async.enabled the lists were ignored (the default device): they are dropped, as are
    empty lists;
  - a config without a mesh section gets the defaults (all 1, no device lists), so an old row
    equals what saving it again stores.

The defaults are written out here as they were when the mesh section came (a migration does not
follow later schema changes). Reversing leaves the rows as they are (the trainer before this
change refuses a mesh section: restore a backup to go back)."""

from django.db import migrations

MOVED = ("train_devices", "rollout_devices")
MESH_DEFAULTS = {"data": 1, "fsdp": 1, "tensor": 1, "train_devices": [], "rollout_devices": [], "rollout_tensor": 1}


def _device_list(value):
    """A stored device list ([0, 1]; stored configs were validated, but text such as "0,1" is read
    too); anything unreadable counts as empty."""
    try:
        if isinstance(value, list):
            return [int(d) for d in value]
        if isinstance(value, int) and not isinstance(value, bool):
            return [value]
        if isinstance(value, str):
            return [int(d) for d in value.strip().strip("[]").replace(",", " ").split()]
    except (TypeError, ValueError):
        pass
    return []


def with_mesh_section(config):
    """`config` (stored plain data) with the async device lists moved into a mesh section; anything
    that is not a config with an async section, or already has its mesh section, is returned unchanged."""
    if not isinstance(config, dict) or not isinstance(config.get("async"), dict):
        return config
    section = config["async"]
    if "mesh" in config and not any(name in section for name in MOVED):
        return config
    section = dict(section)
    lists = {name: _device_list(section.pop(name, None)) for name in MOVED}
    mesh = dict(MESH_DEFAULTS)
    if isinstance(config.get("mesh"), dict):
        mesh.update(config["mesh"])
    if section.get("enabled") is True:
        for name, devices in lists.items():
            if devices:
                mesh[name] = devices
        if len(lists["train_devices"]) > 1:
            mesh["data"] = len(lists["train_devices"])
    out = {}
    for key, value in config.items():  # the mesh section right after async, as the schema orders them
        if key == "mesh":
            continue
        out[key] = section if key == "async" else value
        if key == "async":
            out["mesh"] = mesh
    return out


def move_device_lists(apps, schema_editor):
    for model_name in ("Experiment", "ConfigVersion", "Run"):
        model = apps.get_model("experiments", model_name)
        for pk, config in model.objects.values_list("pk", "config").iterator():
            rewritten = with_mesh_section(config)
            if rewritten != config:
                model.objects.filter(pk=pk).update(config=rewritten)


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0006_stored_paths_relative'),
    ]

    operations = [
        migrations.RunPython(move_device_lists, migrations.RunPython.noop, elidable=True),
    ]
