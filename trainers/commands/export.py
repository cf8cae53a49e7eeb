"""A run's trained policy -> a Hugging Face model folder that transformers (and this project's
`generate`) load: config.json and the tokenizer files copied from the run's model folder, the weights
written from the checkpoint (float32 or bfloat16).

The weights are read from the checkpoint a few parameters at a time (at most `READ_BYTES` of them,
or one larger parameter), straight to host memory (Orbax partial restore into numpy: every shard of
those parameters, whichever mesh wrote them; no device is used), converted (Hugging Face name,
PyTorch layout, dtype) and added to the file being filled; each file is written once it is full. Up
to `MAX_FILE_BYTES` of tensors the folder has one `model.safetensors`; a larger model is split into
`model-00001-of-0000n.safetensors`, ... with `model.safetensors.index.json` (transformers' format:
{"metadata": {"total_size"}, "weight_map"}). So an export holds at most one file's tensors plus one
read in memory, never the whole model."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import tempfile
from typing import Any

import jax
import ml_dtypes
import numpy as np
import orbax.checkpoint as ocp
import safetensors.numpy

from trainers.config import ExperimentConfig
from trainers.loop.checkpoint import check_fits, checkpoint_step_dir, key_name
from trainers.loop.policy import model_config_for, restore_run_params, run_config
from trainers.models.hf_weights import abstract_params, hf_name

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
)

MAX_FILE_BYTES = 2 * 1024**3
"""The most tensor bytes in one exported safetensors file (2 GiB); a larger model is split into files."""

READ_BYTES = 64 * 1024**2
"""The most tensor bytes (as exported) read from the checkpoint in one partial restore: small
parameters are read together, since each read parses the checkpoint's whole tree metadata."""

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


@dataclasses.dataclass(frozen=True)
class ExportTensor:
    """One parameter as it is exported. keys: its path in the checkpoint (e.g. ('blocks', '0', 'attn',
    'q_proj', 'kernel', 'value')); name: its Hugging Face name; shape: ours (transposed: PyTorch's is
    reversed); nbytes: its size in the export dtype."""

    keys: tuple[str, ...]
    name: str
    shape: tuple[int, ...]
    transposed: bool
    nbytes: int


def export_tensors(params_like: Any, dtype: str) -> list[ExportTensor]:
    """The tensors of params (arrays or jax.ShapeDtypeStructs, e.g. `abstract_params(cfg)[1]`), in
    parameter order, with their Hugging Face names (`hf_weights.hf_name`) and sizes in `dtype`."""

    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(params_like)[0]:
        keys = tuple(key_name(entry) for entry in path)
        name, transposed = hf_name(list(keys[:-1] if keys[-1] == "value" else keys))
        shape = tuple(leaf.shape)
        out.append(ExportTensor(keys, name, shape, transposed, math.prod(shape) * DTYPE_BYTES[dtype]))
    return out


def group_into_files(tensors: list[ExportTensor], max_file_bytes: int = MAX_FILE_BYTES) -> list[list[ExportTensor]]:
    """Consecutive tensors packed into files of at most `max_file_bytes` each (a tensor larger than that
    gets a file of its own); one group when everything fits."""
    groups: list[list[ExportTensor]] = []
    size = 0
    for tensor in tensors:
        if not groups or size + tensor.nbytes > max_file_bytes:
            groups.append([])
            size = 0
        groups[-1].append(tensor)
        size += tensor.nbytes
    return groups


def file_names(count: int) -> list[str]:
    """["model.safetensors"] for one file, else transformers' "model-00001-of-00003.safetensors", ..."""
    if count == 1:
        return [SINGLE_FILE]
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def _nested(paths: list[tuple[str, ...]], value_of: Any) -> dict:
    """Nested dicts holding `value_of(keys)` at each path in `paths`."""
    tree: dict = {}
    for keys in paths:
        node = tree
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value_of(keys)
    return tree


def _lookup(tree: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        tree = tree[key]
    return tree


def write_weights(
    step_dir: str,
    params_like: Any,
    folder: str,
    dtype: str = "float32",
    max_file_bytes: int = MAX_FILE_BYTES,
    read_bytes: int | None = None,
) -> list[str]:
    """Write the params of checkpoint directory `step_dir` (`<run_dir>/checkpoints/<step>`) into
    `folder` as Hugging Face safetensors (names, PyTorch layout, `dtype`), file by file, each read
    from the checkpoint in reads of at most `read_bytes` (default READ_BYTES) or one parameter;
    returns the file names written (with the index, when several). `params_like`: the model's
    structure (`abstract_params(cfg)[1]`); a checkpoint of another shape raises IncompatibleCheckpoint
    first."""

    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")
    target = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    check_fits(step_dir, {"params": params_like})
    params_dir = os.path.join(step_dir, "params")
    groups = group_into_files(export_tensors(params_like, dtype), max_file_bytes)
    with ocp.PyTreeCheckpointer() as checkpointer:
        metadata = checkpointer.metadata(params_dir)
        saved = getattr(metadata, "item_metadata", metadata)
        saved = getattr(saved, "tree", saved)

        def read(paths: list[tuple[str, ...]]) -> Any:
            return checkpointer.restore(
                params_dir,
                args=ocp.args.PyTreeRestore(
                    item=_nested(paths, lambda keys: _lookup(saved, keys)),
                    restore_args=_nested(paths, lambda keys: ocp.RestoreArgs(restore_type=np.ndarray)),
                    partial_restore=True,
                ),
            )

        return _write_files(groups, read, folder, target, read_bytes)


def write_params(params: Any, folder: str, dtype: str = "float32", max_file_bytes: int = MAX_FILE_BYTES) -> list[str]:
    """`write_weights` for params already in memory (a LoRA run's base with its adapters folded in):
    the same names, layout, files and index."""

    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")

    target = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    groups = group_into_files(export_tensors(params, dtype), max_file_bytes)
    flat = {
        tuple(key_name(entry) for entry in path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
    }
    return _write_files(groups, lambda paths: _nested(paths, lambda keys: np.asarray(flat[keys])), folder, target, None)


def _write_files(
    groups: list[list[ExportTensor]], read: Any, folder: str, target: Any, read_bytes: int | None
) -> list[str]:
    """Each group of tensors as one safetensors file (transformers' names when several, with the
    index); read(paths) -> nested arrays at those key paths, called for at most `read_bytes` (default
    READ_BYTES) of tensors at a time."""

    names = file_names(len(groups))
    weight_map: dict[str, str] = {}
    for group, file_name in zip(groups, names):
        tensors: dict[str, np.ndarray] = {}
        for part in group_into_files(group, read_bytes or READ_BYTES):
            restored = read([tensor.keys for tensor in part])
            for tensor in part:
                array = np.asarray(_lookup(restored, tensor.keys), dtype=np.float32)
                tensors[tensor.name] = np.ascontiguousarray(array.T if tensor.transposed else array).astype(target)
                weight_map[tensor.name] = file_name
            del restored
        safetensors.numpy.save_file(tensors, os.path.join(folder, file_name), metadata={"format": "pt"})
        del tensors
    if len(names) > 1:
        total = sum(tensor.nbytes for group in groups for tensor in group)
        with open(os.path.join(folder, INDEX_FILE), "w", encoding="utf-8") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        names.append(INDEX_FILE)
    return names


def trained_by(run_dir: str, step: int, model_path: str, dtype: str) -> dict:
    """What trained_by.json records: the run and the base model by their folder names (the run
    directory's name, the model's name under its models directory), never absolute paths, which would
    show where the server keeps its files to whoever downloads the export."""
    return {
        "run": os.path.basename(os.path.normpath(run_dir)),
        "step": step,
        "base_model": os.path.basename(os.path.normpath(model_path)),
        "dtype": dtype,
    }


def export_run(
    run_dir: str,
    out_dir: str,
    step: int | None = None,
    dtype: str = "float32",
    config: ExperimentConfig | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> tuple[str, int]:
    """Write checkpoint `step` (default: the newest) of `run_dir` as a Hugging Face folder `out_dir`;
    returns (out_dir, step). `config`: the run's config (default: its config.yaml). The folder is
    written beside `out_dir` and renamed into place at the end, so a failed export leaves no half folder.
    Raises ValueError for a run on a toy preset (no model folder to take the config and tokenizer from)."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")
    config = config or run_config(run_dir)
    source = config.model.path
    if source is None:
        raise ValueError(
            "export needs a run on a Hugging Face model (model.path); this run trained the toy preset "
            f"'{config.model.preset}' with the character tokenizer"
        )
    if os.path.exists(out_dir) and os.listdir(out_dir):
        raise FileExistsError(f"{out_dir} exists and is not empty; choose a new --out")

    step_dir, step = checkpoint_step_dir(run_dir, step)
    _, params_like = abstract_params(model_config_for(config))

    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        with open(os.path.join(source, "config.json"), encoding="utf-8") as f:
            model_json = json.load(f)
        model_json["torch_dtype"] = dtype
        model_json["dtype"] = dtype
        with open(os.path.join(staging, "config.json"), "w", encoding="utf-8") as f:
            json.dump(model_json, f, indent=2)
        for name in TOKENIZER_FILES:
            if os.path.isfile(os.path.join(source, name)):
                shutil.copyfile(os.path.join(source, name), os.path.join(staging, name))
        if config.model.lora.rank:  # the checkpoint holds adapters: fold them into the base weights
            _, merged, _ = restore_run_params(config, run_dir, model_config_for(config), step)
            write_params(merged, staging, dtype, max_file_bytes)
        else:
            write_weights(step_dir, params_like, staging, dtype, max_file_bytes)
        with open(os.path.join(staging, "trained_by.json"), "w", encoding="utf-8") as f:
            json.dump(trained_by(run_dir, step, source, dtype), f, indent=2)
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty (checked above)
        os.replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir, step
