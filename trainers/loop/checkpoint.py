"""Orbax checkpoints of a run: params, optimizer state, and a JSON `meta` item holding the data
position, RNG seed material and counters.

Layout: `<run_dir>/checkpoints/<step>/{params,opt_state,meta}`; directory names are step numbers.
Orbax writes each checkpoint into a temporary directory and renames it only when complete, so a
kill during a save leaves the previous checkpoint usable (the partial one is ignored and cleaned
up when the next manager opens the directory).

Retention: the newest `keep_last` checkpoints, plus the best one by `keep_best_metric` if set.

Sharded: each process writes the shards of the arrays it holds (Orbax's StandardSave of sharded
jax.Arrays). A restore reads into the placement of the structure it is given (`params_like`: arrays on
a mesh, on one device, or jax.ShapeDtypeStructs), whatever mesh wrote the checkpoint: a checkpoint
written on fsdp 4 restores onto fsdp 2 x tensor 2 or onto one device. Before reading, the checkpoint's
array names and shapes are compared with the structure's: a checkpoint of another model (or optimizer)
raises `IncompatibleCheckpoint` naming the config field, not an Orbax traceback.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint.checkpoint_managers import AnyPreservationPolicy, BestN, LatestN

from trainers.errors import FieldError


class IncompatibleCheckpoint(FieldError):
    """A checkpoint whose arrays do not fit the structure it is restored into (another model preset or
    folder, another optimizer). `field`: the config field that decides the structure; the message says
    what the checkpoint holds, what the config asks for, and the fix (see FieldError)."""


def model_identity(model: Any) -> dict[str, str | None]:
    """What a checkpoint records of the config's `model` section: the model folder's name (never its
    absolute path, which would show where the server keeps its files) or the preset."""
    if model.path is not None:
        return {"path": os.path.basename(os.path.normpath(model.path)), "preset": None}
    return {"path": None, "preset": model.preset}


def _describe_identity(identity: dict | None) -> str:
    if not identity:
        return "a model"
    if identity.get("path"):
        return f"model.path '{identity['path']}'"
    return f"model.preset '{identity['preset']}'"


def key_name(entry: Any) -> str:
    """One entry of a tree path (a dict key, attribute or index) as a string."""
    for attribute in ("key", "name", "idx"):
        if hasattr(entry, attribute):
            return str(getattr(entry, attribute))
    return str(entry)


def _named_shapes(tree: Any) -> dict[str, tuple[int, ...]]:
    """{dotted path (e.g. 'blocks.0.attn.q_proj.kernel.value'): shape} of a tree of arrays,
    ShapeDtypeStructs or Orbax array metadata."""
    return {
        ".".join(key_name(e) for e in path): tuple(getattr(leaf, "shape", ()) or ())
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def saved_shapes(item_dir: str) -> dict[str, tuple[int, ...]]:
    """{dotted path: shape} of one item (`<step_dir>/params`) of a written checkpoint, from its
    metadata (no array is read)."""
    with ocp.PyTreeCheckpointer() as checkpointer:
        metadata = checkpointer.metadata(item_dir)
    tree = getattr(metadata, "item_metadata", metadata)
    return _named_shapes(getattr(tree, "tree", tree))


def describe_model_shapes(shapes: dict[str, tuple[int, ...]]) -> str:
    """e.g. "2 layers, hidden size 64, vocabulary 128, MLP width 256" from a params item's shapes."""
    parts = []
    layers = {name.split(".")[1] for name in shapes if name.startswith("blocks.") and name.split(".")[1].isdigit()}
    if layers:
        parts.append(f"{len(layers)} layers")
    embed = shapes.get("embed.value") or shapes.get("embed")
    if embed and len(embed) == 2:
        parts.append(f"hidden size {embed[1]}, vocabulary {embed[0]}")
    up = next((shape for name, shape in shapes.items() if name.endswith("mlp.up_proj.kernel.value")), None)
    if up:
        parts.append(f"MLP width {up[-1]}")
    return ", ".join(parts) or f"{len(shapes)} arrays"


def _differences(saved: dict, wanted: dict) -> list[str]:
    """What differs between two {name: shape} maps, one line per kind with its first example."""
    reshaped = [name for name in sorted(set(saved) & set(wanted)) if saved[name] != wanted[name]]
    only_saved = sorted(set(saved) - set(wanted))
    only_wanted = sorted(set(wanted) - set(saved))
    lines = []
    if reshaped:
        name = reshaped[0]
        lines.append(
            f"{len(reshaped)} array(s) of another shape (e.g. {name} is {list(saved[name])} in the "
            f"checkpoint, {list(wanted[name])} here)"
        )
    if only_saved:
        lines.append(
            f"{len(only_saved)} array(s) in the checkpoint only (e.g. {only_saved[0]} {list(saved[only_saved[0]])})"
        )
    if only_wanted:
        lines.append(
            f"{len(only_wanted)} array(s) missing from the checkpoint (e.g. {only_wanted[0]} "
            f"{list(wanted[only_wanted[0]])})"
        )
    return lines


def check_fits(step_dir: str, items: dict[str, Any], asked: dict | None = None) -> None:
    """Raise IncompatibleCheckpoint unless every item (`{"params": params_like, ...}`) of the checkpoint
    directory `step_dir` has the same array names and shapes as the structure given for it.
    `asked`: `model_identity` of the config that restores (named in the message)."""
    saved_meta = _read_meta(step_dir)
    for item, like in items.items():
        saved = saved_shapes(os.path.join(step_dir, item))
        wanted = _named_shapes(like)
        differences = _differences(saved, wanted)
        if not differences:
            continue
        where = f"the checkpoint {step_dir}"
        if item == "params":
            holds = _describe_identity(saved_meta.get("model")) if saved_meta.get("model") else "a model"
            asks = _describe_identity(asked) if asked else "this model"
            field = "model.path" if asked and asked.get("path") else "model.preset" if asked else "model"
            message = (
                f"{where} holds {holds} ({describe_model_shapes(saved)}) but the config asks for {asks} "
                f"({describe_model_shapes(wanted)}): {'; '.join(differences)}. Set model.preset / model.path "
                "to the checkpoint's model, or train this model in a new run directory"
            )
        else:
            field = "optimizer.name"
            message = (
                f"{where} holds optimizer state of another shape than the config's optimizer makes: "
                f"{'; '.join(differences)}. Resume with the optimizer the run was started with, or start "
                "a new run directory"
            )
        raise IncompatibleCheckpoint(field, message)


def _read_meta(step_dir: str) -> dict:
    """The checkpoint's JSON meta item ({} when absent or unreadable)."""
    path = os.path.join(step_dir, "meta", "metadata")
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def finished_steps(directory: str) -> list[int]:
    """The steps of the finished checkpoints in `directory` (`<run_dir>/checkpoints`), read-only: Orbax
    renames a checkpoint to its step number only once it is complete."""
    if not os.path.isdir(directory):
        return []
    return sorted(
        int(name)
        for name in os.listdir(directory)
        if name.isdigit() and os.path.isdir(os.path.join(directory, name, "params"))
    )


def checkpoint_step_dir(run_dir: str, step: int | None = None) -> tuple[str, int]:
    """(`<run_dir>/checkpoints/<step>`, step) of checkpoint `step` (default: the newest), without
    opening a checkpoint manager over a run that may be live. FileNotFoundError says which steps exist."""
    steps = finished_steps(os.path.join(run_dir, "checkpoints"))
    if not steps:
        raise FileNotFoundError(f"{run_dir} has no checkpoints")
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise FileNotFoundError(
            f"{run_dir} has no checkpoint at step {step}; it has steps {', '.join(map(str, steps))}"
        )
    return os.path.join(os.path.abspath(run_dir), "checkpoints", str(step)), step


def _default_sharding() -> jax.sharding.Sharding:
    return jax.sharding.SingleDeviceSharding(jax.local_devices()[0])


def abstract_like(tree: Any) -> Any:
    """jax.ShapeDtypeStructs with each leaf's sharding (its current placement: a mesh or one device);
    a leaf without one (an abstract structure) gets the default device. Orbax restores into exactly
    these shardings, whatever mesh wrote the checkpoint (without one it would look for the writer's
    devices and fail on another topology)."""

    def leaf(x: Any) -> jax.ShapeDtypeStruct:
        if not hasattr(x, "shape"):  # a Python scalar
            x = ocp.utils.to_shape_dtype_struct(x)
        sharding = getattr(x, "sharding", None)
        if sharding is None:
            sharding = _default_sharding()
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

    return jax.tree.map(leaf, tree)


class Checkpointer:
    """model: the config's `model` section, recorded in each checkpoint's meta and named when a
    checkpoint of another model is restored."""

    def __init__(
        self,
        directory: str | os.PathLike,
        keep_last: int = 3,
        best_metric: str | None = None,
        best_mode: str = "max",
        model: Any = None,
    ):
        self.model = None if model is None else model_identity(model)
        self.directory = os.path.abspath(os.fspath(directory))
        policies: list[Any] = [LatestN(n=keep_last)]
        if best_metric is not None:
            policies.append(
                BestN(
                    get_metric_fn=lambda metrics: metrics[best_metric],
                    reverse=best_mode == "min",  # BestN keeps the tail of the sorted list
                    n=1,
                    keep_checkpoints_without_metrics=False,
                )
            )
        self._best_metric = best_metric
        options = ocp.CheckpointManagerOptions(
            preservation_policy=AnyPreservationPolicy(policies),
            enable_async_checkpointing=False,
            cleanup_tmp_directories=True,
            create=True,
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("params", "opt_state", "meta")
        )

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def path(self, step: int) -> str:
        return os.path.join(self.directory, str(step))

    def save(self, step: int, params: Any, opt_state: Any, meta: dict, metrics: dict[str, float]) -> str:
        """Write checkpoint `step` synchronously and apply retention; returns its directory."""
        if self.model is not None:
            meta = {**meta, "model": self.model}
        tracked = {k: float(v) for k, v in metrics.items()}
        if self._best_metric is not None and self._best_metric not in tracked:
            tracked = {}  # no value for the metric: keep it only as one of the newest
        self._manager.save(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(params),
                opt_state=ocp.args.StandardSave(opt_state),
                meta=ocp.args.JsonSave(meta),
            ),
            metrics=tracked or None,
            force=True,
        )
        self._manager.wait_until_finished()
        return self.path(step)

    def restore(self, step: int, params_like: Any, opt_state_like: Any) -> tuple[Any, Any, dict]:
        """Restore checkpoint `step` into the structures and placements (shardings) of `params_like` /
        `opt_state_like`. Raises IncompatibleCheckpoint when their shapes differ from the checkpoint's."""
        check_fits(self.path(step), {"params": params_like, "opt_state": opt_state_like}, self.model)
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardRestore(abstract_like(params_like)),
                opt_state=ocp.args.StandardRestore(abstract_like(opt_state_like)),
                meta=ocp.args.JsonRestore(),
            ),
        )
        return restored["params"], restored["opt_state"], dict(restored["meta"])

    def restore_params(self, step: int, params_like: Any) -> Any:
        """Only the params of checkpoint `step`, into the structure of `params_like` (arrays or
        jax.ShapeDtypeStruct leaves: their shardings, else the default device)."""
        check_fits(self.path(step), {"params": params_like}, self.model)
        abstract = abstract_like(params_like)
        restored = self._manager.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore(abstract)))
        return restored["params"]

    def size_bytes(self, step: int) -> int:
        total = 0
        for root, _, files in os.walk(self.path(step)):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
        return total

    def close(self) -> None:
        self._manager.close()


def restore_params_at(step_dir: str | os.PathLike, params_like: Any, model: Any = None) -> Any:
    """Only the params of one finished checkpoint directory `step_dir` (`<run_dir>/checkpoints/<step>`,
    e.g. another run's), into the structure and placement of `params_like`. Read-only: it opens no
    checkpoint manager over the folder (which would clean up, or apply retention to, a live run's
    checkpoints). `model`: the config's model section, named when the checkpoint holds another model
    (IncompatibleCheckpoint)."""
    step_dir = os.path.abspath(os.fspath(step_dir))
    params_dir = os.path.join(step_dir, "params")
    if not os.path.isdir(params_dir):
        raise FileNotFoundError(f"{step_dir} is not a checkpoint directory (it has no params/)")
    check_fits(step_dir, {"params": params_like}, None if model is None else model_identity(model))
    abstract = abstract_like(params_like)
    with ocp.StandardCheckpointer() as checkpointer:
        return checkpointer.restore(params_dir, abstract)
