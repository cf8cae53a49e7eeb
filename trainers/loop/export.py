"""A run's trained policy -> a Hugging Face model folder that transformers (and this project's
`generate`) load: config.json and the tokenizer files copied from the run's model folder,
`model.safetensors` written from the checkpoint (float32 or bfloat16)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from trainers.config import ExperimentConfig
from trainers.loop.policy import model_config_for, restore_run_params, run_config

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                   "chat_template.jinja", "vocab.json", "merges.txt", "added_tokens.json")


def trained_by(run_dir: str, step: int, model_path: str, dtype: str) -> dict:
    """What trained_by.json records: the run and the base model by their folder names (the run
    directory's name, the model's name under its models directory), never absolute paths, which would
    show where the server keeps its files to whoever downloads the export."""
    return {"run": os.path.basename(os.path.normpath(run_dir)), "step": step,
            "base_model": os.path.basename(os.path.normpath(model_path)), "dtype": dtype}


def export_run(run_dir: str, out_dir: str, step: int | None = None, dtype: str = "float32",
               config: ExperimentConfig | None = None) -> tuple[str, int]:
    """Write checkpoint `step` (default: the newest) of `run_dir` as a Hugging Face folder `out_dir`;
    returns (out_dir, step). `config`: the run's config (default: its config.yaml). The folder is
    written beside `out_dir` and renamed into place at the end, so a failed export leaves no half folder.
    Raises ValueError for a run on a toy preset (no model folder to take the config and tokenizer from)."""
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")
    config = config or run_config(run_dir)
    source = config.model.path
    if source is None:
        raise ValueError("export needs a run on a Hugging Face model (model.path); this run trained the toy preset "
                         f"'{config.model.preset}' with the character tokenizer")
    if os.path.exists(out_dir) and os.listdir(out_dir):
        raise FileExistsError(f"{out_dir} exists and is not empty; choose a new --out")
    graphdef, params, step = restore_run_params(config, run_dir, model_config_for(config), step)
    from trainers.models.hf_weights import save_pretrained_weights

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
        save_pretrained_weights(params, staging, dtype)
        with open(os.path.join(staging, "trained_by.json"), "w", encoding="utf-8") as f:
            json.dump(trained_by(run_dir, step, source, dtype), f, indent=2)
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty (checked above)
        os.replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir, step
