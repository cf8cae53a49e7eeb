"""Sharded checkpoints: a checkpoint written on one mesh restores onto another (fsdp 4 -> fsdp 2 x
tensor 2, -> one device) with the target's shardings and the same values; a run resumed on another
mesh goes on exactly; a checkpoint of another model is refused with the config field named, before
any step. (8 CPU devices, set up by tests/conftest.py.)"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import jax
import numpy as np
import optax
import pytest

from tests.conftest import ROOT, xla_flags_with_devices
from trainers.config import parse_config
from trainers.loop.checkpoint import (
    Checkpointer,
    IncompatibleCheckpoint,
    abstract_like,
    describe_model_shapes,
    restore_params_at,
    saved_shapes,
)
from trainers.loop.trainer import GRPOTrainer
from trainers.models.hf_weights import abstract_params
from trainers.models.presets import PRESETS
from trainers.models.transformer import init_params
from trainers.parallel.mesh import make_mesh
from trainers.parallel.rules import state_shardings
from trainers.step.hooks import Action, Control, Hooks


def _leaves(tree):
    return jax.tree.leaves(tree)


@pytest.fixture(scope="module")
def written_on_fsdp4(tmp_path_factory):
    """A checkpoint (params + Adam state after one update) written from fsdp 4 over devices 0-3."""
    mesh = make_mesh(jax.devices()[:4], {"fsdp": 4})
    _, params = init_params(PRESETS["tiny"], seed=0)
    params = jax.device_put(params, state_shardings(params, mesh))
    optimizer = optax.adam(0.1)
    opt_state = optimizer.init(params)
    grads = jax.tree.map(lambda p: 0.01 * p + 0.001, params)
    _, opt_state = optimizer.update(grads, opt_state, params)
    directory = str(tmp_path_factory.mktemp("fsdp4") / "checkpoints")
    checkpointer = Checkpointer(directory)
    checkpointer.save(1, params, opt_state, {"step": 1}, {})
    checkpointer.close()
    host = lambda tree: [np.asarray(leaf) for leaf in _leaves(tree)]  # noqa: E731
    return directory, host(params), host(opt_state), optimizer


def test_the_checkpoint_holds_each_shard_as_written(written_on_fsdp4):
    """Orbax wrote the fsdp 4 layout: the q projection [64, 64] in 4 row blocks of 16."""
    directory, _, _, _ = written_on_fsdp4
    from orbax.checkpoint import StandardCheckpointer

    with StandardCheckpointer() as checkpointer:
        tree = checkpointer.metadata(os.path.join(directory, "1", "params")).item_metadata.tree
    q = tree["blocks"]["0"]["attn"]["q_proj"]["kernel"]["value"]
    assert q.shape == (64, 64) and q.storage.chunk_shape == (16, 64)


@pytest.mark.parametrize("target", ["fsdp2_tensor2", "one_device"])
def test_a_checkpoint_written_on_fsdp4_restores_onto_another_mesh(written_on_fsdp4, target):
    directory, params_then, opt_then, optimizer = written_on_fsdp4
    _, fresh = init_params(PRESETS["tiny"], seed=7)  # other values: the restore must replace them
    if target == "fsdp2_tensor2":
        mesh = make_mesh(jax.devices()[4:8], {"fsdp": 2, "tensor": 2})
        params_like = jax.device_put(fresh, state_shardings(fresh, mesh))
    else:
        params_like = jax.device_put(fresh, jax.devices()[5])
    opt_like = optimizer.init(params_like)
    checkpointer = Checkpointer(directory)
    params, opt_state, meta = checkpointer.restore(1, params_like, opt_like)
    checkpointer.close()
    assert meta["step"] == 1
    for restored, like, then in zip(
        _leaves(params) + _leaves(opt_state), _leaves(params_like) + _leaves(opt_like), params_then + opt_then
    ):
        assert restored.sharding == like.sharding
        np.testing.assert_array_equal(np.asarray(restored), then)
    if target == "fsdp2_tensor2":  # the q projection [64, 64]: fsdp 2 rows x tensor 2 columns per device
        q = params["blocks"][0]["attn"]["q_proj"]["kernel"][...]
        assert {s.data.shape for s in q.addressable_shards} == {(32, 32)}


def test_a_fork_and_an_abstract_restore_take_the_target_placement(written_on_fsdp4):
    """restore_params_at (a fork from another run's checkpoint) restores into the target's mesh; an
    abstract structure without shardings (export, generate) lands on the default device, although the
    writer's devices 0-3 are not the default device alone."""
    directory, params_then, _, _ = written_on_fsdp4
    mesh = make_mesh(jax.devices()[4:8], {"fsdp": 2, "tensor": 2})
    _, fresh = init_params(PRESETS["tiny"], seed=7)
    like = jax.device_put(fresh, state_shardings(fresh, mesh))
    forked = restore_params_at(os.path.join(directory, "1"), like)
    for restored, target, then in zip(_leaves(forked), _leaves(like), params_then):
        assert restored.sharding == target.sharding
        np.testing.assert_array_equal(np.asarray(restored), then)
    _, abstract = abstract_params(PRESETS["tiny"])
    checkpointer = Checkpointer(directory)
    params = checkpointer.restore_params(1, abstract)
    checkpointer.close()
    for restored, then in zip(_leaves(params), params_then):
        assert restored.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])
        np.testing.assert_array_equal(np.asarray(restored), then)
    # abstract_like keeps a placed leaf's sharding
    assert _leaves(abstract_like(like))[0].sharding == _leaves(like)[0].sharding


def test_optimizer_state_of_another_optimizer_is_refused_naming_the_field(written_on_fsdp4):
    """Adam's state restored into SGD-with-momentum's: IncompatibleCheckpoint names optimizer.name."""
    directory, _, _, _ = written_on_fsdp4
    _, params = init_params(PRESETS["tiny"], seed=7)
    checkpointer = Checkpointer(directory)
    with pytest.raises(IncompatibleCheckpoint) as error:
        checkpointer.restore(1, params, optax.sgd(0.1, momentum=0.9).init(params))
    checkpointer.close()
    assert error.value.field == "optimizer.name"
    assert "in the checkpoint only" in str(error.value) and "missing from the checkpoint" in str(error.value)


WRITE_FROM_TWO_PROCESSES = textwrap.dedent("""
    import sys
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{sys.argv[2]}", num_processes=2, process_id=int(sys.argv[1]))
    import numpy as np, optax
    from trainers.loop.checkpoint import Checkpointer
    from trainers.models.presets import PRESETS
    from trainers.models.transformer import init_params
    from trainers.parallel.host import put
    from trainers.parallel.mesh import make_mesh
    from trainers.parallel.rules import state_shardings

    _, params = init_params(PRESETS["tiny"], seed=0)
    mesh = make_mesh(jax.devices(), {"fsdp": 4})  # 2 processes x 2 devices
    placed = jax.tree.map(lambda x, s: put(np.asarray(x), s), params, state_shardings(params, mesh))
    checkpointer = Checkpointer(sys.argv[3])
    checkpointer.save(1, placed, optax.sgd(0.1).init(placed), {"step": 1}, {})
    checkpointer.close()
    print("saved", flush=True)
""")


def test_a_checkpoint_written_by_two_processes_restores_in_one(tmp_path):
    """Two processes (2 CPU devices each, gloo) write one fsdp 4 checkpoint, each its own shards; this
    one process restores it onto fsdp 2 x tensor 2 and onto one device with the same values."""
    script = tmp_path / "write.py"
    script.write_text(WRITE_FROM_TWO_PROCESSES)
    directory = tmp_path / "checkpoints"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "XLA_FLAGS": xla_flags_with_devices(2),
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": ROOT,
    }
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), str(i), str(port), str(directory)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for i in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=240)[0] for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert [p.returncode for p in processes] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(directory / "1" / "params"))

    _, params = init_params(PRESETS["tiny"], seed=0)
    mesh = make_mesh(jax.devices()[:4], {"fsdp": 2, "tensor": 2})
    like = jax.device_put(params, state_shardings(params, mesh))
    like = jax.tree.map(lambda x: x * 0, like)
    on_mesh = restore_params_at(str(directory / "1"), like)
    on_one = restore_params_at(str(directory / "1"), abstract_params(PRESETS["tiny"])[1])
    for restored_mesh, target, restored_one, want in zip(
        _leaves(on_mesh), _leaves(like), _leaves(on_one), _leaves(params)
    ):
        assert restored_mesh.sharding == target.sharding
        np.testing.assert_array_equal(np.asarray(restored_mesh), np.asarray(want))
        np.testing.assert_array_equal(np.asarray(restored_one), np.asarray(want))


# -- a run resumed on another mesh ---------------------------------------------------------------

RUN = {
    "seed": 2,
    "model": {"preset": "tiny"},
    "data": {"task": "arithmetic", "train_prompts": 12, "eval_prompts": 0},
    "rollout": {"max_new_tokens": 6},
    "batch": {"prompts_per_step": 4, "mini_batch_prompts": 2, "train_micro_batch_sequences": 8},
    "grpo": {"num_generations": 4, "num_iterations": 2, "beta": 0.04},
    # SGD: an update is linear in the gradient, so float rounding stays rounding (see test_parallel_mesh)
    "optimizer": {"name": "sgd", "b1": 0.0, "learning_rate": 0.5},
    "train": {"max_steps": 3},
    "checkpoint": {"every_steps": 1, "keep_last": 3},
}


class _Record(Hooks, Control):
    """Records each step's metrics; pauses the run once step `pause_after` is done."""

    def __init__(self, pause_after: int | None = None):
        self.metrics: dict[int, dict] = {}
        self.resumed_at: int | None = None
        self.pause_after = pause_after

    def on_step(self, step, metrics):
        self.metrics[step] = dict(metrics)

    def on_resume(self, step):
        self.resumed_at = step

    def poll(self):
        done = max(self.metrics, default=0)
        return Action.PAUSE if self.pause_after is not None and done >= self.pause_after else Action.CONTINUE


def _train(mesh: dict, run_dir: str, record: _Record) -> GRPOTrainer:
    trainer = GRPOTrainer(parse_config({**RUN, "mesh": mesh}), run_dir, hooks=record, control=record)
    trainer.run()
    return trainer


def test_a_run_resumed_on_another_mesh_goes_on_exactly(tmp_path):
    """Steps 1-2 on fsdp 4 (checkpoint every step), step 3 resumed from the step-2 checkpoint on
    fsdp 2 x tensor 2 = 3 uninterrupted steps on one device: loss, gradient norm, parameters, step and
    data position."""
    straight_record = _Record()
    straight = _train({}, str(tmp_path / "straight"), straight_record)
    run_dir = str(tmp_path / "moved")
    first = _Record(pause_after=2)
    first_trainer = _train({"fsdp": 4}, run_dir, first)
    assert sorted(first.metrics) == [1, 2] and first_trainer.state.step == 2
    assert len(first_trainer.placement.train_mesh.devices.flat) == 4
    second = _Record()
    moved = _train({"fsdp": 2, "tensor": 2}, run_dir, second)
    assert second.resumed_at == 2 and sorted(second.metrics) == [3]
    assert (moved.state.step, moved.state.data_position) == (straight.state.step, straight.state.data_position)
    assert moved.state.data_position == 3 * RUN["batch"]["prompts_per_step"]
    for step, metrics in [(1, first.metrics[1]), (2, first.metrics[2]), (3, second.metrics[3])]:
        for name in ("loss/policy", "loss/kl", "grad_norm"):
            np.testing.assert_allclose(
                metrics[name], straight_record.metrics[step][name], rtol=0, atol=1e-5, err_msg=f"step {step} {name}"
            )
    for leaf, base in zip(_leaves(moved.state.params), _leaves(straight.state.params)):
        np.testing.assert_allclose(np.asarray(leaf), np.asarray(base), rtol=0, atol=1e-5)
    # the resumed weights live on the new mesh, split as its rules say
    kernel = moved.state.params["blocks"][0]["mlp"]["up_proj"]["kernel"][...]
    assert {s.data.shape for s in kernel.addressable_shards} == {(32, 128)}
    assert {d.id for d in kernel.sharding.device_set} == {0, 1, 2, 3}


# -- a checkpoint of another model -------------------------------------------------------------


def test_a_checkpoint_of_another_model_is_refused_naming_the_field(tmp_path):
    """A run directory (and a fork's init_checkpoint) holding a 'tiny' checkpoint, opened with
    model.preset 'small': IncompatibleCheckpoint names model.preset and both models, before any step;
    the directory's checkpoints are left as they were."""
    run_dir = str(tmp_path / "tiny")
    record = _Record()
    tiny = {**RUN, "train": {"max_steps": 1}}
    GRPOTrainer(parse_config(tiny), run_dir, hooks=record).run()
    step_dir = os.path.join(run_dir, "checkpoints", "1")
    with open(os.path.join(step_dir, "meta", "metadata")) as f:
        assert json.load(f)["model"] == {"path": None, "preset": "tiny"}
    assert describe_model_shapes(saved_shapes(os.path.join(step_dir, "params"))) == (
        "2 layers, hidden size 64, vocabulary 128, MLP width 256"
    )

    small = parse_config({**tiny, "model": {"preset": "small"}, "train": {"max_steps": 2}})
    resumed = _Record()
    trainer = GRPOTrainer(small, run_dir, hooks=resumed)
    with pytest.raises(IncompatibleCheckpoint) as error:
        trainer.run()
    message = str(error.value)
    assert error.value.field == "model.preset"
    assert message.startswith("model.preset: ")
    assert "model.preset 'tiny' (2 layers, hidden size 64" in message
    assert "model.preset 'small' (4 layers, hidden size 128" in message
    assert "Orbax" not in message and "Traceback" not in message
    assert resumed.metrics == {} and resumed.resumed_at is None
    assert sorted(os.listdir(os.path.join(run_dir, "checkpoints"))) == ["1"]

    with pytest.raises(IncompatibleCheckpoint) as error:
        GRPOTrainer(small, str(tmp_path / "fork"), init_checkpoint=step_dir)
    assert error.value.field == "model.preset" and "model.preset 'tiny'" in str(error.value)


# -- export, file by file ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory):
    """A run directory on the tiny Hugging Face Llama whose step-1 checkpoint (its weights + 0.01 x
    index) was written from fsdp 4: (run_dir, model_dir, model config, the checkpoint's params on host)."""
    import yaml

    from tests.tiny_models import write_tiny_model
    from trainers.loop.policy import model_config_for
    from trainers.models.hf_weights import load_pretrained

    base = tmp_path_factory.mktemp("export")
    model_dir = write_tiny_model(base / "model")
    raw = {"model": {"path": str(model_dir)}, "data": {"task": "arithmetic_words"}}
    run_dir = base / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(raw))
    config = parse_config(raw)
    cfg = model_config_for(config)
    _, params = load_pretrained(str(model_dir), cfg, progress=False)
    leaves, treedef = jax.tree.flatten(params)
    params = jax.tree.unflatten(treedef, [leaf + 0.01 * i for i, leaf in enumerate(leaves)])
    mesh = make_mesh(jax.devices()[:4], {"fsdp": 4})
    placed = jax.device_put(params, state_shardings(params, mesh))
    checkpointer = Checkpointer(str(run_dir / "checkpoints"), model=config.model)
    checkpointer.save(1, placed, optax.sgd(0.1).init(placed), {"step": 1}, {})
    checkpointer.close()
    return run_dir, model_dir, cfg, jax.tree.map(np.asarray, params)


def test_export_groups_tensors_into_bounded_files():
    """Pure packing: consecutive tensors, at most the bound per file, an oversized tensor alone."""
    from trainers.commands.export import ExportTensor, file_names, group_into_files

    sizes = [30, 50, 20, 120, 10, 10]
    tensors = [ExportTensor(("t", str(i)), f"t{i}", (n,), False, n) for i, n in enumerate(sizes)]
    groups = group_into_files(tensors, max_file_bytes=100)
    assert [[t.nbytes for t in g] for g in groups] == [[30, 50, 20], [120], [10, 10]]
    assert [[t.nbytes for t in g] for g in group_into_files(tensors, 1000)] == [sizes]
    assert file_names(1) == ["model.safetensors"]
    assert file_names(3) == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
    ]


def test_export_writes_bounded_shards_with_an_index_that_load_back(sharded_run, tmp_path, monkeypatch):
    """With a 32 KiB bound the tiny Llama (about 110 KiB of float32) is written as several files plus
    model.safetensors.index.json, read at most 16 KiB (or one parameter) at a time; load_pretrained
    gives the checkpoint's params back exactly and transformers the same logits as this project."""
    import orbax.checkpoint as ocp
    import safetensors.numpy

    from trainers.commands.export import export_run
    from trainers.models import transformer as model_lib
    from trainers.models.hf_weights import load_pretrained

    run_dir, model_dir, cfg, params = sharded_run
    bound = 32 * 1024
    written, restores = [], []
    save_file, restore = safetensors.numpy.save_file, ocp.PyTreeCheckpointer.restore

    def spy_save(tensors, path, metadata=None):
        written.append((os.path.basename(path), sum(t.nbytes for t in tensors.values()), len(tensors)))
        return save_file(tensors, path, metadata=metadata)

    def spy_restore(self, directory, *args, **kwargs):
        out = restore(self, directory, *args, **kwargs)
        restores.append([leaf.nbytes for leaf in jax.tree.leaves(out)])
        return out

    monkeypatch.setattr(safetensors.numpy, "save_file", spy_save)
    monkeypatch.setattr(ocp.PyTreeCheckpointer, "restore", spy_restore)
    out = tmp_path / "export"
    monkeypatch.setattr("trainers.commands.export.READ_BYTES", 16 * 1024)
    assert export_run(str(run_dir), str(out), max_file_bytes=bound) == (str(out), 1)

    count = len(written)
    assert count >= 3
    names = [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]
    assert [name for name, _, _ in written] == names
    assert all(size <= bound or tensors == 1 for _, size, tensors in written)
    # every parameter read once, in reads of at most 16 KiB or of one larger parameter
    assert sorted(n for read in restores for n in read) == sorted(leaf.nbytes for leaf in jax.tree.leaves(params))
    assert all(sum(read) <= 16 * 1024 or len(read) == 1 for read in restores)
    assert len(restores) > count
    assert not (out / "model.safetensors").exists()
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == names
    assert index["metadata"]["total_size"] == sum(size for _, size, _ in written)
    assert len(index["weight_map"]) == len(jax.tree.leaves(params))
    assert {"config.json", "tokenizer.json", "trained_by.json"} <= set(os.listdir(out))

    _, loaded = load_pretrained(str(out), cfg, progress=False)
    for got, want in zip(jax.tree.leaves(loaded), jax.tree.leaves(params)):
        np.testing.assert_array_equal(np.asarray(got), want)

    import torch
    import transformers

    reference = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    tokens = np.array([[1, 40, 41, 42, 43, 44, 45]], np.int32)
    with torch.no_grad():
        theirs = reference(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()
    graphdef, _ = abstract_params(cfg)
    ours = np.asarray(model_lib.forward(graphdef, loaded, tokens, np.ones(tokens.shape, bool)))
    assert np.max(np.abs(ours - theirs)) <= 1e-4


def test_a_model_under_the_bound_is_one_file_in_bfloat16(sharded_run, tmp_path):
    import ml_dtypes
    from safetensors.numpy import load_file

    from trainers.commands.export import export_run
    from trainers.models.hf_weights import hf_state_dict

    run_dir, _, _, params = sharded_run
    out = tmp_path / "bf16"
    export_run(str(run_dir), str(out), dtype="bfloat16")
    assert not (out / "model.safetensors.index.json").exists()
    tensors = load_file(str(out / "model.safetensors"))
    expected = hf_state_dict(params, "bfloat16")
    assert sorted(tensors) == sorted(expected)
    for name, array in expected.items():
        assert tensors[name].dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(tensors[name], array)


def test_export_of_a_missing_step_names_the_steps(sharded_run, tmp_path):
    from trainers.commands.export import export_run

    run_dir, _, _, _ = sharded_run
    with pytest.raises(FileNotFoundError, match="no checkpoint at step 7; it has steps 1"):
        export_run(str(run_dir), str(tmp_path / "x"), step=7)
    assert not (tmp_path / "x").exists()


def test_a_run_written_on_fsdp4_loads_for_generation_on_the_default_device(sharded_run):
    """load_policy (generate) restores a run's checkpoint written on fsdp 4 onto the default device."""
    from trainers.loop.policy import load_policy

    run_dir, _, _, params = sharded_run
    policy = load_policy(str(run_dir))
    assert policy.description.endswith("step 1")
    for got, want in zip(jax.tree.leaves(policy.params), jax.tree.leaves(params)):
        assert got.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])
        np.testing.assert_array_equal(np.asarray(got), want)
