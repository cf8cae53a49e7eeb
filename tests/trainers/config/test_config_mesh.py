"""The `mesh` section: validation before launch (each rule names its field and the fix, messages
written out by hand), the old async device lists' message, the batch plan's devices, and a mesh
that only the run's devices refute (a one-line config error from `python -m trainers run`)."""

import pytest

from trainers.cli import main
from trainers.config import ConfigError, parse_config, parse_yaml
from trainers.parallel.sizes import MeshError, resolve_axis_sizes
from trainers.step.plan import make_plan


def problems(raw, overrides=()):
    with pytest.raises(ConfigError) as info:
        parse_config(raw, overrides)
    return info.value.as_dict()


# 4 prompts x G 4 = 16 sequences a step: splits over 1, 2, 4, 8 and 16 devices
SMALL = {"batch": {"prompts_per_step": 4}, "grpo": {"num_generations": 4}}


def small(**mesh):
    return {**SMALL, "mesh": mesh}


def test_defaults_are_one_device():
    m = parse_config({}).mesh
    assert (m.data, m.fsdp, m.tensor, m.train_devices, m.rollout_devices, m.rollout_tensor) == (1, 1, 1, [], [], 1)
    assert make_plan(parse_config({})).mesh_text == "one device (no mesh)"


def test_sizes_are_at_least_one_or_minus_one():
    assert problems(small(fsdp=0)) == {
        "mesh.fsdp": "mesh.fsdp=0: an axis needs at least one device; use 1 (not "
        "split), 2 or more, or -1 (the rest of the devices)"
    }
    assert "greater than or equal to -1" in problems(small(data=-2))["mesh.data"]
    assert "greater than or equal to 1" in problems(small(rollout_tensor=0))["mesh.rollout_tensor"]


def test_at_most_one_axis_is_minus_one():
    assert problems(small(data=-1, tensor=-1)) == {
        "mesh.tensor": "only one axis may be -1 (the rest of the devices); mesh.data and mesh.tensor are; give the "
        "others a size"
    }
    parse_config(small(fsdp=-1))  # the rest of the devices: known when the run starts


def test_the_axes_product_must_equal_the_train_devices():
    assert problems(small(data=2, train_devices=[0, 1, 2, 3])) == {
        "mesh.train_devices": "data 2 x fsdp 1 x tensor 1 = 2, not the 4 devices of mesh.train_devices; make the "
        "product 4 (or set one axis to -1)"
    }
    assert problems(small(train_devices=[3, 5])) == {
        "mesh.train_devices": "data 1 x fsdp 1 x tensor 1 = 1, not the 2 devices of mesh.train_devices; make the "
        "product 2 (or set one axis to -1)"
    }
    # -1 is the rest: 8 devices / data 2 = fsdp 4
    plan = make_plan(parse_config(small(data=2, fsdp=-1, train_devices=list(range(8)))))
    assert (plan.mesh_data, plan.mesh_fsdp, plan.mesh_tensor) == (2, 4, 1)
    assert problems(small(data=3, fsdp=-1, train_devices=[0, 1, 2, 3])) == {
        "mesh.fsdp": "-1 has no size: data 3 x tensor 1 = 3 does not divide the 4 devices of mesh.train_devices; "
        "choose sizes whose product divides 4"
    }


def test_resolve_axis_sizes_by_hand():
    assert resolve_axis_sizes({"data": 2, "fsdp": -1, "tensor": 2}, 8) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert resolve_axis_sizes({"data": 1, "fsdp": 4, "tensor": 2}, 8) == {"data": 1, "fsdp": 4, "tensor": 2}
    with pytest.raises(MeshError) as error:
        resolve_axis_sizes({"data": 1, "fsdp": 4, "tensor": 2}, 4)
    assert (error.value.field, error.value.message) == (
        "mesh",
        "data 1 x fsdp 4 x tensor 2 = 8, not the 4 devices; make the product 4 (or set one axis to -1)",
    )
    # a MeshError is a ConfigError of one problem: shown like any invalid config
    assert isinstance(error.value, ConfigError) and error.value.as_dict() == {"mesh": error.value.message}


def test_each_device_once_and_train_and_rollout_apart():
    assert problems(small(fsdp=-1, train_devices=[0, 1, 1, 2, 2])) == {
        "mesh.train_devices": "lists device 1 and 2 more than once; list each device once"
    }
    raw = {**small(data=2, train_devices=[0, 1], rollout_devices=[1, 2]), "async": {"enabled": True}}
    assert problems(raw) == {
        "mesh.rollout_devices": "device 1 is in both mesh.train_devices and "
        "mesh.rollout_devices; give training and generation disjoint "
        "devices"
    }


def test_rollout_devices_need_async():
    assert problems(small(rollout_devices=[1])) == {
        "mesh.rollout_devices": "generating on devices of its own is asynchronous GRPO; set async.enabled=true, or "
        "leave mesh.rollout_devices empty to generate on the train mesh"
    }
    config = parse_config({**small(rollout_devices=[1]), "async": {"enabled": True}})
    assert config.mesh.rollout_devices == [1] and config.mesh.train_devices == []


def test_rollout_tensor_divides_the_rollout_devices():
    raw = {**small(rollout_devices=[2, 3, 4], rollout_tensor=2), "async": {"enabled": True}}
    assert problems(raw) == {
        "mesh.rollout_tensor": "mesh.rollout_tensor=2 does not divide the 3 devices of "
        "mesh.rollout_devices; use 1 or 3, or list a multiple of 2 devices"
    }
    assert problems(small(rollout_tensor=2)) == {
        "mesh.rollout_tensor": "mesh.rollout_tensor=2 applies only to generation on devices of its own; list them in "
        "mesh.rollout_devices (asynchronous GRPO), or set it to 1 (generation on the train "
        "mesh splits by mesh.tensor)"
    }


def test_tensor_divides_heads_kv_heads_mlp_and_vocabulary():
    # tiny: 4 heads, 2 KV heads, MLP 256, vocabulary 128
    assert problems(small(tensor=4)) == {
        "mesh.tensor": "mesh.tensor=4: 4 does not divide the KV heads (2) of model.preset 'tiny'; tensor parallelism "
        "splits attention by heads, the MLP by its width and the LM head by the vocabulary; use 1 or 2"
    }
    parse_config(small(tensor=2))
    # smollm2-135m: 9 heads, 3 KV heads, MLP 1536, vocabulary 49152
    raw = {**small(tensor=2), "model": {"preset": "smollm2-135m"}}
    assert problems(raw) == {
        "mesh.tensor": "mesh.tensor=2: 2 does not divide the attention heads (9) and KV heads (3) of model.preset "
        "'smollm2-135m'; tensor parallelism splits attention by heads, the MLP by its width and the "
        "LM head by the vocabulary; use 1 or 3"
    }
    raw["mesh"]["tensor"] = 3
    parse_config(raw)
    # -1 resolved from the listed devices: 4
    assert problems(small(tensor=-1, train_devices=[0, 1, 2, 3]))["mesh.tensor"].startswith(
        "mesh.tensor=-1 (the rest of mesh.train_devices): 4 does not divide the KV heads (2) of model.preset 'tiny'"
    )
    parse_config(small(tensor=-1))  # the rest of the devices: the run checks it when it starts


def test_tensor_against_a_model_folder(tmp_path):
    from tests.tiny_models import write_tiny_model

    folder = write_tiny_model(tmp_path / "model")  # 4 heads, 2 KV heads, MLP 64, vocabulary 320
    raw = {**small(tensor=4), "model": {"path": str(folder)}, "data": {"task": "arithmetic"}}
    assert problems(raw) == {
        "mesh.tensor": "mesh.tensor=4: 4 does not divide the KV heads (2) of the model of model.path (its "
        "config.json); tensor parallelism splits attention by heads, the MLP by its width and the LM "
        "head by the vocabulary; use 1 or 2"
    }
    raw["mesh"]["tensor"] = 2
    assert parse_config(raw).mesh.tensor == 2


def test_rollout_tensor_divides_the_model():
    raw = {**small(train_devices=[0], rollout_devices=[4, 5, 6, 7], rollout_tensor=4), "async": {"enabled": True}}
    assert problems(raw) == {
        "mesh.rollout_tensor": "mesh.rollout_tensor=4: 4 does not divide the KV heads (2) of model.preset 'tiny'; "
        "tensor parallelism splits attention by heads, the MLP by its width and the LM head by "
        "the vocabulary; use 1 or 2"
    }


def test_micro_batches_split_over_data_x_fsdp():
    # 4 prompts x G 3 = 12 sequences a step; mini-batch 2 prompts = 6 sequences (the train micro-batch);
    # log-prob micro-batch 4
    raw = {
        "batch": {"prompts_per_step": 4, "mini_batch_prompts": 2, "logprob_micro_batch_sequences": 4},
        "grpo": {"num_generations": 3},
        "mesh": {"data": 2, "fsdp": 2},
    }
    assert problems(raw) == {
        "batch.train_micro_batch_sequences": "batch.train_micro_batch_sequences=null (the mini-batch, 6 sequences): "
        "micro-batches of 6 sequences cannot be split evenly over the 4 devices of the train mesh's data x fsdp "
        "(mesh.data 2 x mesh.fsdp 2); make batch.train_micro_batch_sequences a multiple of 4, or use data x fsdp "
        "= 1, 2 or 3"
    }
    raw["mesh"] = {"data": 3}
    assert problems(raw) == {
        "batch.logprob_micro_batch_sequences": "batch.logprob_micro_batch_sequences=4: micro-batches of 4 sequences "
        "cannot be split evenly over the 3 devices of the train mesh's data x fsdp (mesh.data 3 x mesh.fsdp 1); make "
        "batch.logprob_micro_batch_sequences a multiple of 3, or use data x fsdp = 1 or 2"
    }
    raw["mesh"] = {"data": 2, "tensor": 2}  # tensor does not split the sequences
    parse_config(raw)
    raw["mesh"] = {"fsdp": -1}  # known only when the run starts
    parse_config(raw)
    raw["mesh"] = {"fsdp": -1, "train_devices": [0, 1, 2, 3]}
    assert list(problems(raw)) == ["batch.train_micro_batch_sequences"]


def test_rollout_micro_batch_splits_over_the_rollout_mesh():
    # 3 prompts x G 2 = 6 sequences a step: one generation call of 6 over the rollout mesh's data axis
    raw = {
        "batch": {"prompts_per_step": 3},
        "grpo": {"num_generations": 2},
        "async": {"enabled": True},
        "mesh": {"data": 2, "train_devices": [0, 1], "rollout_devices": [2, 3, 4, 5]},
    }
    assert problems(raw) == {
        "batch.rollout_micro_batch_sequences": "batch.rollout_micro_batch_sequences=null (the whole step, 6 "
        "sequences): micro-batches of 6 sequences cannot be split evenly over the 4 devices of the rollout mesh's "
        "data axis (4 mesh.rollout_devices / mesh.rollout_tensor 1); make batch.rollout_micro_batch_sequences a "
        "multiple of 4, or use a rollout data axis of 1, 2 or 3"
    }
    raw["mesh"]["rollout_tensor"] = 2  # data axis 4 / 2 = 2 devices
    parse_config(raw)
    raw["mesh"]["rollout_tensor"] = 1
    raw["batch"]["rollout_micro_batch_sequences"] = 2
    assert list(problems(raw)) == ["batch.rollout_micro_batch_sequences"]  # 2 over 4 devices: still uneven
    raw["mesh"]["rollout_devices"] = [2, 3]
    parse_config(raw)


def test_old_async_device_lists_name_their_new_place():
    expected = {
        "async.train_devices": "async.train_devices moved to mesh.train_devices; write mesh: {train_devices: "
        "[0, 1], data: 2} (--set mesh.train_devices=[0, 1]) and remove "
        "async.train_devices"
    }
    assert problems({"async": {"enabled": True, "train_devices": [0, 1]}}) == expected  # API / JSON
    with pytest.raises(ConfigError) as info:  # YAML
        parse_yaml("async:\n  enabled: true\n  train_devices: [0, 1]\n")
    assert info.value.as_dict() == expected
    assert problems({}, ["async.train_devices=0,1"]) == expected  # --set
    assert problems({}, ["async.rollout_devices=3"]) == {
        "async.rollout_devices": "async.rollout_devices moved to mesh.rollout_devices; write mesh: {rollout_devices: "
        "[3]} (--set mesh.rollout_devices=[3]) and remove async.rollout_devices"
    }
    # empty lists (every config stored before the move has them) are dropped silently
    for empty in ([], "", "[]", None):
        parse_config({"async": {"train_devices": empty, "rollout_devices": empty}})
    assert "train_devices" not in parse_config({}, ["async.train_devices="]).to_dict()["async"]


def test_plan_shows_the_mesh_and_sequences_per_device():
    config = parse_config(
        {
            "batch": {"prompts_per_step": 8, "train_micro_batch_sequences": 16},
            "grpo": {"num_generations": 4, "beta": 0.0},
            "mesh": {"data": 2, "fsdp": 4},
        }
    )
    plan = make_plan(config)
    text = plan.describe()
    assert "  train mesh                    data 2 x fsdp 4 x tensor 1 (8 devices)\n" in text
    assert "  rollout mesh                  the train mesh\n" in text
    assert "  train micro-batch             16 sequences = 2 per device (split over data x fsdp = 8)\n" in text
    assert "  rollout micro-batch           32 sequences = 4 per device (split over data x fsdp = 8)\n" in text
    assert "log-prob micro-batch" not in text  # beta 0, mu 1, one mini-batch: no log-prob pass
    assert plan.train_sequences_per_device == 2

    config = parse_config(
        {
            **SMALL,
            "async": {"enabled": True},
            "mesh": {
                "fsdp": -1,
                "tensor": 2,
                "train_devices": [0, 1, 2, 3],
                "rollout_devices": [4, 5, 6, 7],
                "rollout_tensor": 2,
            },
        }
    )
    text = make_plan(config).describe()
    assert "data 1 x fsdp 2 x tensor 2 (4 devices: mesh.train_devices [0, 1, 2, 3])" in text
    assert "data 2 x tensor 2 (4 devices: mesh.rollout_devices [4, 5, 6, 7])" in text
    assert "tensor splits the model, not the sequences" in text
    assert "16 sequences = 8 per device (split over the rollout mesh's data axis = 2)" in text

    plan = make_plan(parse_config(small(fsdp=-1)))
    assert plan.train_sequences_per_device is None
    assert "data 1 x fsdp -1 x tensor 1 (-1: the rest of the devices, known when the run starts)" in plan.describe()
    assert "16 sequences (split over data x fsdp when the run starts)" in plan.describe()


def test_a_mesh_the_devices_cannot_form_is_a_one_line_config_error(tmp_path, capsys):
    """fsdp 16 is valid before launch (16 sequences split evenly) but the run sees 8 devices: `run`
    exits 2 with the problem naming the field, no traceback."""
    path = tmp_path / "cfg.yaml"
    path.write_text(
        "model: {preset: tiny}\nbatch: {prompts_per_step: 4}\ngrpo: {num_generations: 4}\n"
        "train: {max_steps: 1}\nmesh: {fsdp: 16}\n"
    )
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert (
        f"{path}: invalid config (1 problem)\n  mesh: data x fsdp x tensor = 16 devices but the run sees 8 free "
        "device(s); lower the sizes, or start the run with more devices" in err
    )
    assert "Traceback" not in err
