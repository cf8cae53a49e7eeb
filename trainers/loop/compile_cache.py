"""JAX's persistent compilation cache for training runs: a compiled step (update, sampler, log-prob
pass) is written to disk once and read back by every later run of the same shapes on the same
machine kind, so a run (or a resumed attempt) does not compile again what an earlier one compiled.

`python -m trainers run` and the platform's worker call `enable_compilation_cache` before training.
The folder is, in order: JAX_COMPILATION_CACHE_DIR when set (JAX's own variable), the `directory`
given (the platform: <PLATFORM_DATA_DIR>/jax-cache), else ~/.cache/grpo-trainers/jax-cache.
TRAINERS_COMPILATION_CACHE=0 turns it off.
"""

from __future__ import annotations

import os

import jax

MIN_COMPILE_TIME_S = 0.5
"""Only programs that took at least this long to compile are written (not every small eager op)."""


def default_directory() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "grpo-trainers", "jax-cache")


def enable_compilation_cache(
    directory: str | None = None, min_compile_time_s: float = MIN_COMPILE_TIME_S
) -> str | None:
    """Turn on JAX's persistent compilation cache; returns its folder (None when turned off by
    TRAINERS_COMPILATION_CACHE=0). Call before the first compile; safe to call again."""
    if os.environ.get("TRAINERS_COMPILATION_CACHE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None

    folder = os.environ.get("JAX_COMPILATION_CACHE_DIR") or directory or default_directory()
    os.makedirs(folder, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_time_s)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
