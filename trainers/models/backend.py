"""The platform the model's programs are traced for: the kernels and chunk sizes they pick at trace
time (`paged_attention.default_implementation`, `transformer`'s fused attention and LM-head chunks)
follow `compute_backend()`, which is JAX's default backend unless `lowering_for` says otherwise.

`lowering_for("cuda")` or `lowering_for("tpu")` lets a CPU-only machine trace and lower a program
as a GPU or a TPU would run it (`jax.jit(f).trace(...).lower(lowering_platforms=("cuda",))`),
without compiling it: the accelerator lane of the tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

LOWERING_BACKENDS = {"cpu": "cpu", "cuda": "gpu", "rocm": "gpu", "gpu": "gpu", "tpu": "tpu"}
"""A lowering platform's name (as `lowering_platforms` takes it, or the backend's own) -> the backend
name `compute_backend` returns for it."""

_override: str | None = None


def compute_backend() -> str:
    """The backend programs are traced for: "cpu", "gpu" or "tpu". JAX's default backend, unless
    inside `lowering_for`."""
    return jax.default_backend() if _override is None else _override


@contextlib.contextmanager
def lowering_for(platform: str) -> Iterator[None]:
    """Inside: `compute_backend()` is `platform`'s backend ("cuda", "rocm" or "gpu": "gpu"; "tpu";
    "cpu"), so programs traced here pick that platform's kernels; lower them with
    `lowering_platforms=(platform,)` (a program for another backend cannot run here).

    jit's caches do not know the override: a trace made before would be reused inside, one made
    inside would be reused after. So JAX's caches are cleared on entering and on leaving (later
    calls trace and compile again). For lowering only, never during a run: the override holds for
    every thread."""
    global _override
    if platform not in LOWERING_BACKENDS:
        raise ValueError(f"lowering platform {platform!r}: expected one of {', '.join(LOWERING_BACKENDS)}")
    previous = _override
    jax.clear_caches()
    _override = LOWERING_BACKENDS[platform]
    try:
        yield
    finally:
        _override = previous
        jax.clear_caches()
