"""Hugging Face safetensors <-> this project's parameters (`trainers.models.transformer`).

`load_pretrained(folder, cfg)` builds the model's structure without initialising it (no random
weights are ever made) and fills it tensor by tensor, shard by shard: each tensor is read,
converted to float32 (the master weights) and transposed where PyTorch's Linear layout [out, in]
differs from ours [in, out], so at most one tensor beyond the model is in memory at a time.
`load_pretrained(folder, cfg, shardings=...)` (a mesh) makes each parameter a global array whose
shards are read straight from the file, block by block (safetensors' `get_slice`), onto the devices
that hold them: no process reads, and no device holds, more than its shards.
`save_pretrained_weights(params, cfg, folder, dtype)` writes the reverse: `model.safetensors` with
Hugging Face names, loadable by transformers.

Names (ours -> Hugging Face):
  embed                            model.embed_tokens.weight                [V, H]
  blocks/i/attn_norm/scale         model.layers.i.input_layernorm.weight
  blocks/i/attn/{q,k,v,o}_proj/kernel  model.layers.i.self_attn.{q,k,v,o}_proj.weight (transposed)
  blocks/i/attn/{q,k,v,o}_proj/bias    model.layers.i.self_attn.{q,k,v,o}_proj.bias
  blocks/i/attn/{q,k}_norm/scale   model.layers.i.self_attn.{q,k}_norm.weight
  blocks/i/mlp_norm/scale          model.layers.i.post_attention_layernorm.weight
  blocks/i/mlp/{gate,up,down}_proj/kernel  model.layers.i.mlp.{gate,up,down}_proj.weight (transposed)
  final_norm/scale                 model.norm.weight
  lm_head                          lm_head.weight (transposed; absent when tied)
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import jax
import ml_dtypes
import numpy as np
import safetensors.numpy
from flax import nnx
from tqdm import tqdm

from trainers.models.hf_config import ModelFolderError
from trainers.models.presets import ModelConfig
from trainers.models.transformer import Transformer

_NORM_NAMES = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm"}


def _keys(path: tuple) -> list[str]:
    """A tree path (DictKey / GetAttrKey entries) -> its plain keys, without the trailing 'value'."""
    keys = [str(getattr(entry, "key", getattr(entry, "name", entry))) for entry in path]
    return keys[:-1] if keys and keys[-1] == "value" else keys


def hf_name(keys: list[str]) -> tuple[str, bool]:
    """Our parameter path (e.g. ['blocks', '3', 'attn', 'q_proj', 'kernel']) -> (Hugging Face tensor
    name, whether the tensor is transposed between the two layouts)."""
    if keys == ["embed"]:
        return "model.embed_tokens.weight", False
    if keys == ["lm_head"]:
        return "lm_head.weight", True
    if keys == ["final_norm", "scale"]:
        return "model.norm.weight", False
    if keys[0] == "blocks":
        prefix = f"model.layers.{keys[1]}."
        rest = keys[2:]
        if rest[0] in _NORM_NAMES:
            return prefix + _NORM_NAMES[rest[0]] + ".weight", False
        module = {"attn": "self_attn", "mlp": "mlp"}[rest[0]]
        if rest[-1] == "scale":  # q_norm / k_norm
            return f"{prefix}{module}.{rest[1]}.weight", False
        if rest[-1] == "kernel":
            return f"{prefix}{module}.{rest[1]}.weight", True
        if rest[-1] == "bias":
            return f"{prefix}{module}.{rest[1]}.bias", False
    raise ValueError(f"no Hugging Face name for parameter {'/'.join(keys)}")


def abstract_params(cfg: ModelConfig) -> tuple[nnx.GraphDef, Any]:
    """(graphdef, params of jax.ShapeDtypeStruct): the model's structure, no memory allocated."""
    model = nnx.eval_shape(lambda: Transformer(cfg, nnx.Rngs(0)))
    return nnx.split(model, nnx.Param)


def _weight_files(folder: str) -> list[str]:
    """The folder's safetensors files: the index's shards in order, else model.safetensors, else all."""
    index_path = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index_path):
        with open(index_path, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map", {})
        return sorted(set(weight_map.values()))
    if os.path.isfile(os.path.join(folder, "model.safetensors")):
        return ["model.safetensors"]
    names = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    if not names:
        raise ModelFolderError(f"{folder} has no *.safetensors weights")
    return names


def _tensors(folder: str) -> Iterator[tuple[str, np.ndarray]]:
    """(name, float32 array) for every tensor of the folder, one at a time, shard by shard."""
    for file_name in _weight_files(folder):
        with safetensors.safe_open(os.path.join(folder, file_name), framework="flax") as f:
            for name in f.keys():
                yield name, np.asarray(f.get_tensor(name), dtype=np.float32)


def _ignored(name: str, cfg: ModelConfig) -> bool:
    """A folder's tensor the architecture has no place for but that is expected: a tied model's
    `lm_head.weight`, rotary `inv_freq` buffers."""
    return (name == "lm_head.weight" and cfg.tie_embeddings) or name.endswith("rotary_emb.inv_freq")


def _shape_error(
    folder: str, name: str, file_shape: tuple[int, ...], shape: tuple[int, ...], transposed: bool
) -> ModelFolderError:
    return ModelFolderError(
        f"{folder}: tensor {name!r} has shape {file_shape}, expected "
        f"{shape[::-1] if transposed else shape} from config.json"
    )


def _unexpected_error(folder: str, name: str) -> ModelFolderError:
    return ModelFolderError(f"{folder}: unexpected tensor {name!r} for this architecture")


def _missing_error(folder: str, missing: list[str]) -> ModelFolderError:
    return ModelFolderError(f"{folder}: missing tensors {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")


def _load_whole(folder: str, cfg: ModelConfig, slot_of_name: dict, filled: list, bar: Any) -> None:
    """Fill `filled` (one slot per parameter) tensor by tensor, each whole on the default device."""
    for name, tensor in _tensors(folder):
        if name not in slot_of_name:
            if _ignored(name, cfg):
                continue
            raise _unexpected_error(folder, name)
        slot, transposed, shape = slot_of_name[name]
        array = tensor.T if transposed else tensor
        if array.shape != shape:
            raise _shape_error(folder, name, tensor.shape, shape, transposed)
        filled[slot] = jax.device_put(np.ascontiguousarray(array))
        del tensor, array
        if bar is not None:
            bar.update(1)


def _shard_reader(tensor_slice: Any, transposed: bool) -> Callable[[tuple[slice, ...]], np.ndarray]:
    """The `jax.make_array_from_callback` callback of one tensor: our index (a tuple of slices into
    the [in, out] parameter) -> that block alone, float32, read from the file's [out, in] tensor with
    the swapped index and transposed where the layouts differ. A block several local devices share
    (replicated along a mesh axis) is read once."""
    blocks: dict[tuple, np.ndarray] = {}

    def read(index: tuple[slice, ...]) -> np.ndarray:
        key = tuple((s.start, s.stop, s.step) for s in index)
        if key not in blocks:
            block = np.asarray(tensor_slice[tuple(index[::-1]) if transposed else tuple(index)], dtype=np.float32)
            blocks[key] = np.ascontiguousarray(block.T) if transposed else block
        return blocks[key]

    return read


def _load_sharded(folder: str, cfg: ModelConfig, slot_of_name: dict, filled: list, shardings: list, bar: Any) -> None:
    """Fill `filled` parameter by parameter with global arrays of `shardings` (one per slot): every
    device's shard is read straight from the file (`get_slice`), so this process reads only the
    blocks its own devices hold and no device holds more than its shard. Names and shapes are
    checked from the files' headers before any tensor is read."""

    with contextlib.ExitStack() as stack:
        handle_of_name: dict[str, Any] = {}
        for file_name in _weight_files(folder):
            handle = stack.enter_context(safetensors.safe_open(os.path.join(folder, file_name), framework="numpy"))
            for name in handle.keys():
                if name not in slot_of_name:
                    if _ignored(name, cfg):
                        continue
                    raise _unexpected_error(folder, name)
                slot, transposed, shape = slot_of_name[name]
                file_shape = tuple(handle.get_slice(name).get_shape())
                if (file_shape[::-1] if transposed else file_shape) != shape:
                    raise _shape_error(folder, name, file_shape, shape, transposed)
                handle_of_name[name] = handle
        missing = [name for name in slot_of_name if name not in handle_of_name]
        if missing:
            raise _missing_error(folder, missing)
        for name, handle in handle_of_name.items():
            slot, transposed, shape = slot_of_name[name]
            filled[slot] = jax.make_array_from_callback(
                shape, shardings[slot], _shard_reader(handle.get_slice(name), transposed)
            )
            if bar is not None:
                bar.update(1)


def load_pretrained(
    folder: str, cfg: ModelConfig, progress: bool = True, shardings: Any = None
) -> tuple[nnx.GraphDef, Any]:
    """(graphdef, params) of the Hugging Face checkpoint in `folder`, params float32 (the master
    weights, whatever the files' dtype).

    shardings: None = each parameter whole on the default device, read tensor by tensor. Else a tree
    like the params whose leaves are `jax.sharding.Sharding`s (`trainers.parallel.rules.state_shardings`
    of `abstract_params(cfg)[1]`): each parameter is made with that sharding, every device's shard
    read alone from the file (`jax.make_array_from_callback` + safetensors' `get_slice`), so neither
    a process nor a device ever holds the whole model.

    Raises ModelFolderError naming a tensor that is missing, unexpected in shape, or left over (a
    tensor the architecture has no place for; a tied model's `lm_head.weight` is allowed and ignored)."""
    graphdef, abstract = abstract_params(cfg)
    leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    slot_of_name: dict[str, tuple[int, bool, tuple[int, ...]]] = {}
    for slot, (path, leaf) in enumerate(leaves_with_paths):
        name, transposed = hf_name(_keys(path))
        slot_of_name[name] = (slot, transposed, tuple(leaf.shape))
    filled: list[Any] = [None] * len(leaves_with_paths)
    bar = None
    if progress:
        bar = tqdm(
            total=len(slot_of_name),
            unit="tensor",
            desc=f"loading {os.path.basename(folder.rstrip('/'))}",
            dynamic_ncols=True,
            file=__import__("sys").stderr,
        )
    try:
        if shardings is None:
            _load_whole(folder, cfg, slot_of_name, filled, bar)
        else:
            _load_sharded(folder, cfg, slot_of_name, filled, treedef.flatten_up_to(shardings), bar)
    finally:
        if bar is not None:
            bar.close()
    missing = [name for name, (slot, _, _) in slot_of_name.items() if filled[slot] is None]
    if missing:
        raise _missing_error(folder, missing)
    return graphdef, jax.tree_util.tree_unflatten(treedef, filled)


def hf_state_dict(params: Any, dtype: str = "float32") -> dict[str, np.ndarray]:
    """Our params -> {Hugging Face name: array in PyTorch layout}, cast to `dtype` (float32 / bfloat16)."""
    target = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        name, transposed = hf_name(_keys(path))
        array = np.asarray(leaf, dtype=np.float32)
        out[name] = np.ascontiguousarray(array.T if transposed else array).astype(target)
    return out


def save_pretrained_weights(params: Any, folder: str, dtype: str = "float32") -> str:
    """Write `folder/model.safetensors` (Hugging Face names and layout, `dtype`); returns its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.safetensors")
    safetensors.numpy.save_file(hf_state_dict(params, dtype), path, metadata={"format": "pt"})
    return path
