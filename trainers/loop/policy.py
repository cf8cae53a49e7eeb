"""The policy a run starts from: its model shape, its tokenizer and its first weights, from the
config's `model.path` (a Hugging Face folder) or a named toy `model.preset` (random init).
The trainer, the `generate` and `export` commands and the benchmarks all start here."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from trainers.config import ExperimentConfig, load_config
from trainers.data.tokenizer import model_tokenizer
from trainers.errors import FieldError
from trainers.models.hf_config import read_model_config
from trainers.models.presets import PRESETS, ModelConfig


def model_config_for(config: ExperimentConfig, remat: bool | None = None) -> ModelConfig:
    """The model's shape and numerics (dtype, remat) under `config`. remat: model.remat as the run
    resolved it (`memory_estimate.fit_step`); None: model.remat, off when null."""
    m = config.model
    on = bool(m.remat) if remat is None else remat
    if m.path is not None:
        return read_model_config(m.path, dtype=m.dtype, remat=on)
    return dataclasses.replace(PRESETS[m.preset], dtype=m.dtype, remat=on)


def tokenizer_for(config: ExperimentConfig) -> Any:
    """The model folder's own tokenizer with `model.path`, else the built-in character tokenizer."""
    return model_tokenizer(config.model.path, config.data.tokenizer)


def model_field(config: ExperimentConfig) -> str:
    """The config field that chose the model (and with it the tokenizer): "model.path" or "model.preset"."""
    return "model.path" if config.model.path is not None else "model.preset"


def check_tokenizer_fits(tokenizer: Any, model_config: ModelConfig, source: str) -> None:
    """Raises FieldError(`source`, ...) unless every id the tokenizer can produce has a row in the model's
    embedding: largest id = max(vocab_size - 1, pad, bos and EOS ids), added and special tokens included
    (`vocab_size` of HFTokenizer counts them), must be < model_config.vocab_size. An id past the table
    would read no row and turn into NaN logits without an error. `source` is the config field to change
    (`model_field(config)`, e.g. "model.path")."""
    special_ids = [tokenizer.pad_id, tokenizer.bos_id, *tokenizer.eos_ids]
    largest_id = max([tokenizer.vocab_size - 1, *(i for i in special_ids if i is not None)])
    if largest_id < model_config.vocab_size:
        return
    folder = getattr(tokenizer, "folder", None)
    which = f"the tokenizer of {folder}" if folder is not None else "the built-in character tokenizer"
    raise FieldError(
        source,
        f"{which} produces ids up to {largest_id} (added and special tokens included) but "
        f"the model's vocab_size is {model_config.vocab_size} (embedding rows 0.."
        f"{model_config.vocab_size - 1}); use a model whose config.json vocab_size is at "
        f"least {largest_id + 1}, or a tokenizer made for this model",
    )


def initial_params(
    config: ExperimentConfig, model_config: ModelConfig, progress: bool = True, shardings: Any = None
) -> tuple[Any, Any]:
    """(graphdef, float32 params): the folder's weights with `model.path` (loaded tensor by tensor, with
    a progress bar when `progress`), else a random init from `config.seed`.

    shardings: None = on the default device. Else a tree like the params of `jax.sharding.Sharding`s
    (`Placement.state_shardings(abstract_params(model_config)[1])`): the params are made with them
    directly, each device reading or drawing only its own shards, never the whole model on one device."""
    if config.model.path is not None:
        # lazy: keeps this module JAX-free (the memory estimate and the platform import it)
        from trainers.models.hf_weights import load_pretrained

        return load_pretrained(config.model.path, model_config, progress=progress, shardings=shardings)
    # lazy: keeps this module JAX-free (the memory estimate and the platform import it)
    from trainers.models.transformer import init_params

    if shardings is None:
        return init_params(model_config, config.seed)
    return _init_params_sharded(model_config, config.seed, shardings)


def _init_params_sharded(model_config: ModelConfig, seed: int, shardings: Any) -> tuple[Any, Any]:
    """`init_params(model_config, seed)` traced once and compiled with `out_shardings`, so each device
    computes only its shards (threefry random bits are partitionable: the values are those of the
    unsharded init)."""
    # lazy: keeps this module JAX-free (the memory estimate and the platform import it)
    import jax

    # lazy: keeps this module JAX-free (the memory estimate and the platform import it)
    from trainers.models.hf_weights import abstract_params
    from trainers.models.transformer import init_params

    graphdef, _ = abstract_params(model_config)
    params = jax.jit(lambda: init_params(model_config, seed)[1], out_shardings=shardings)()
    return graphdef, params


@dataclasses.dataclass
class LoadedPolicy:
    """A policy ready to generate with: from a Hugging Face folder or a run's checkpoint."""

    model_config: ModelConfig
    graphdef: Any
    params: Any
    tokenizer: Any
    chat: bool  # the run's data.chat_template (a folder: whether its tokenizer has a template)
    system_prompt: str | None
    description: str  # e.g. "runs/x step 30 (model var/models/smollm2)"


def is_run_dir(path: str) -> bool:

    return os.path.isfile(os.path.join(path, "config.yaml")) and os.path.isdir(os.path.join(path, "checkpoints"))


def run_config(run_dir: str) -> ExperimentConfig:
    """The config a run directory was trained under (its config.yaml)."""

    return load_config(os.path.join(run_dir, "config.yaml"))


def restore_run_params(
    config: ExperimentConfig, run_dir: str, model_config: ModelConfig, step: int | None = None
) -> tuple[Any, Any, int]:
    """(graphdef, params, step) of a run's checkpoint `step` (default: the newest), on the default device,
    whatever mesh wrote it. No weights are loaded from the model folder: the checkpoint is restored into
    the model's abstract structure. Read-only (no checkpoint manager is opened over a run that may be
    live); a checkpoint of another model raises IncompatibleCheckpoint naming model.preset / model.path."""
    # lazy: keeps this module JAX-free (the memory estimate and the platform import it)
    from trainers.loop.checkpoint import checkpoint_step_dir, restore_params_at
    from trainers.models.hf_weights import abstract_params

    step_dir, step = checkpoint_step_dir(run_dir, step)
    if config.model.lora.rank:
        graphdef, params = _merged_lora_params(config, model_config, step_dir)
        return graphdef, params, step
    graphdef, abstract = abstract_params(model_config)
    return graphdef, restore_params_at(step_dir, abstract, config.model), step


def _merged_lora_params(config: ExperimentConfig, model_config: ModelConfig, step_dir: str) -> tuple[Any, Any]:
    """A LoRA run's checkpoint holds its adapters only: the base weights (model.path, or the preset's
    init from the seed) with the restored adapters folded in (W + alpha/r A B), as the plain model's
    (graphdef, params)."""
    # lazy: keeps this module JAX-free (the memory estimate and the platform import it)
    from flax import nnx

    # lazy: keeps this module JAX-free (the memory estimate and the platform import it)
    from trainers.loop.checkpoint import restore_params_at
    from trainers.models.lora import add_lora, lora_settings, merge_into_base, split_adapters

    graphdef, params = initial_params(config, model_config, progress=False)
    lora_graphdef, params = add_lora(graphdef, params, lora_settings(config.model.lora), config.seed)
    adapters, base = split_adapters(params)
    adapters = restore_params_at(step_dir, adapters, config.model)
    return merge_into_base(lora_graphdef, nnx.merge_state(adapters, base))


def load_policy(path: str, step: int | None = None, progress: bool = True) -> LoadedPolicy:
    """A Hugging Face folder (its weights and tokenizer) or a run directory (the newest checkpoint,
    or `step`, with the run's model and tokenizer). FileNotFoundError / ValueError say which it is not;
    FieldError (`check_tokenizer_fits`) when the tokenizer's ids do not fit the model, before any weight is read."""

    if is_run_dir(path):
        config = run_config(path)
        model_config = model_config_for(config)
        tokenizer = tokenizer_for(config)
        check_tokenizer_fits(tokenizer, model_config, model_field(config))
        graphdef, params, step = restore_run_params(config, path, model_config, step)
        chat = tokenizer.has_chat_template if config.data.chat_template is None else config.data.chat_template
        return LoadedPolicy(
            model_config, graphdef, params, tokenizer, chat, config.data.system_prompt, f"{path} step {step}"
        )
    if os.path.isfile(os.path.join(path, "config.json")):
        if step is not None:
            raise ValueError(f"--step applies to a run directory; {path} is a model folder")
        # lazy: keeps this module JAX-free (the memory estimate and the platform import it)
        from trainers.data.hf_tokenizer import HFTokenizer
        from trainers.models.hf_weights import load_pretrained

        model_config = read_model_config(path)
        tokenizer = HFTokenizer.from_folder(path)
        check_tokenizer_fits(tokenizer, model_config, "model.path")
        graphdef, params = load_pretrained(path, model_config, progress=progress)
        return LoadedPolicy(model_config, graphdef, params, tokenizer, tokenizer.has_chat_template, None, path)
    raise FileNotFoundError(
        f"{path} is neither a Hugging Face model folder (config.json) nor a run directory "
        "(config.yaml and checkpoints/)"
    )
