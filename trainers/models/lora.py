"""LoRA adapters on the transformer's projections, with Qwix (`qwix.LoraProvider` +
`qwix.apply_lora_to_model`, as Tunix does).

A targeted projection y = x @ W (W [in, out], `transformer.Linear`) becomes

    y = x @ W + (alpha / rank) * (x @ A) @ B,        A [in, rank], B [rank, out]

with A drawn from He-uniform (Qwix's default) and B zero, so the adapted model starts as the base
model. A and B are `nnx.LoRAParam` variables (a subclass of `nnx.Param`) named `kernel_lora_a` /
`kernel_lora_b` beside the layer's `kernel`, float32 like every master weight, with the kernel's
logical axes on their outer dimension (A: (in axis, None), B: (None, out axis)), so
`trainers.parallel.rules` shards them like the kernel (the rank axis whole) and the scanned-layers
path (`transformer._scan_blocks`) stacks them with the rest of each block.

How Qwix does it: `apply_lora_to_model` clones the model (arrays shared, not copied), gives its
class an intercepted `__call__` that, inside the model, routes `jnp.dot` / `lax.dot_general` /
`jnp.einsum` to the provider, tags every module with its path (`qwix_path`, a static attribute), and
runs the model once on a tiny input to create A and B in every module whose path matches
`target_modules` (`re.fullmatch` over paths like `blocks/3/attn/q_proj`). The provider finds the
weight in a matmul by tracing the right operand back to the module's `nnx.Param` (through
`astype`), so `transformer.Linear` (a `jnp.dot` in `matmul_2d`) is adapted as it is, on the Python
loop over blocks and on the scanned path alike, with or without remat, in training passes and in
generation (prefill and decode steps). Only the model's `__call__` is intercepted: the LM head
(`Transformer.logits`) and the embedding are never adapted.

Two traps, handled: adapters created inside the scanned path would be created on per-iteration
copies of a block and lost, so `add_lora` runs its creating call with the blocks as the loop; and
`nnx.remat`'s merge raises a trace-level error under the interception, so the transformer's loop
remats with `jax.checkpoint` over the block's split state instead (the same values).

Precision: the adapters are float32; with a bfloat16 model the LoRA term promotes the layer's
output to float32, so `transformer.Linear` casts its output back to the input dtype (a no-op
without LoRA). The x @ A matmul then runs in float32 (rank/out of the layer's matmul FLOPs).

Dropout: only 0.0. Qwix's LoRA dropout draws its key from a stateful `nnx.Rngs` attached to the
modules (`qwix_rngs`), which the functional (graphdef, params) API used here does not carry; a
nonzero `model.lora.dropout` is refused in `add_lora`.

Training only the adapters: `split_adapters(params) -> (adapters, base)`, differentiate a loss of
`merge_params(adapters, base)` with respect to `adapters` only, and build the optimizer over
`adapters` (`tx.init(adapters)`): gradients and optimizer state then exist for the adapters only,
no zero buffers for the base. The reference model of the KL term is `adapters_off(params)` (B
zeroed, base arrays shared), or cheaper, the base graphdef (`merge_into_base`'s, or the one
`add_lora` was given) with `base`, which skips the LoRA matmuls.
"""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import qwix
from flax import nnx

from trainers.models import transformer
from trainers.models.lora_targets import DEFAULT_TARGET_MODULES
from trainers.models.transformer import Linear, Transformer, causal_padding_mask, positions_from_valid
from trainers.parallel.rules import is_variable

_LORA_A, _LORA_B = "kernel_lora_a", "kernel_lora_b"  # Qwix's names: the weight's name + "_lora_a" / "_lora_b"


@dataclasses.dataclass(frozen=True)
class LoraSettings:
    """rank r and alpha (the LoRA term is scaled by alpha / r); dropout on the LoRA input (only 0.0,
    see the module docstring); target_modules: a regex that must fullmatch a projection's module
    path, e.g. `blocks/0/attn/q_proj`, `blocks/0/mlp/down_proj`."""

    rank: int
    alpha: float
    dropout: float = 0.0
    target_modules: str = DEFAULT_TARGET_MODULES

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def lora_settings(section) -> LoraSettings:
    """The settings of a config's `model.lora` section (rank, alpha, dropout, target_modules)."""
    return LoraSettings(section.rank, section.alpha, section.dropout, section.target_modules)


def _module_path(path: tuple) -> str:
    return "/".join(str(part) for part in path)


def _targeted_linears(model: nnx.Module, pattern: str) -> dict[str, Linear]:
    """{path: Linear} of the projections whose module path fullmatches `pattern`."""
    return {
        _module_path(path): module
        for path, module in nnx.iter_modules(model)
        if isinstance(module, Linear) and re.fullmatch(pattern, _module_path(path))
    }


def add_lora(
    graphdef: nnx.GraphDef, params: nnx.State, settings: LoraSettings, seed: int
) -> tuple[nnx.GraphDef, nnx.State]:
    """The model with LoRA adapters on every projection matched by `settings.target_modules`:
    (graphdef, params) where params holds the base `nnx.Param` arrays (the same arrays, not copies)
    and the new `nnx.LoRAParam` A (random, from `seed`) and B (zero), so the initial function is the
    base model's. Runs the model once eagerly on a [1, 2] token input (Qwix creates the adapters as
    the matmuls run), with the blocks as the Python loop (`transformer.SCAN_LAYERS` set to False for
    that call, then restored: call it before other threads use the model). Works on placed
    (sharded) params too: each adapter is then placed like its kernel's outer axis. Raises ValueError naming
    model.lora.target_modules when the pattern matches no projection, model.lora.rank when rank < 1 or rank > min(in,
    out) of a targeted projection, and model.lora.dropout when dropout is not 0."""
    model = nnx.merge(graphdef, params)
    try:
        targets = _targeted_linears(model, settings.target_modules)
    except re.error as error:
        raise ValueError(
            f"model.lora.target_modules {settings.target_modules!r} is not a valid regex: {error}"
        ) from error
    if not targets:
        paths = [_module_path(path) for path, module in nnx.iter_modules(model) if isinstance(module, Linear)]
        raise ValueError(
            f"model.lora.target_modules {settings.target_modules!r} matches no projection; "
            f"module paths look like {', '.join(paths[:7])}"
        )
    if settings.rank < 1:
        raise ValueError(f"model.lora.rank must be at least 1, got {settings.rank}")
    for path, linear in targets.items():
        in_features, out_features = linear.kernel.shape
        if settings.rank > min(in_features, out_features):
            raise ValueError(
                f"model.lora.rank {settings.rank} is larger than {path} "
                f"({in_features} x {out_features}): at most {min(in_features, out_features)}"
            )
    if settings.dropout != 0.0:
        raise ValueError(
            f"model.lora.dropout {settings.dropout}: only 0.0 is supported (Qwix's LoRA dropout "
            "needs a stateful nnx.Rngs on the modules)"
        )

    provider = qwix.LoraProvider(
        module_path=settings.target_modules, rank=settings.rank, alpha=settings.alpha, dropout=0.0
    )
    valid = jnp.ones((1, 2), jnp.bool_)
    # The creating call must run the blocks as the Python loop: the scanned path (on a mesh) calls
    # per-iteration copies of a block, so adapters created there would be lost.
    scan_layers, transformer.SCAN_LAYERS = transformer.SCAN_LAYERS, False
    try:
        lora_model = qwix.apply_lora_to_model(
            model,
            provider,
            jnp.zeros((1, 2), jnp.int32),
            positions_from_valid(valid),
            causal_padding_mask(valid),
            rngs=nnx.Rngs(seed),
        )
    finally:
        transformer.SCAN_LAYERS = scan_layers
    missing = [
        path
        for path, linear in _targeted_linears(lora_model, settings.target_modules).items()
        if not hasattr(linear, _LORA_B)
    ]
    if missing:
        raise RuntimeError(f"Qwix created no adapters for {', '.join(missing)}")
    lora_model.lora_settings = settings  # static: merge_into_base reads alpha / rank from the graphdef
    return nnx.split(lora_model, nnx.Param)


def is_adapter(leaf) -> bool:
    """True for an adapter variable (A or B, `nnx.LoRAParam`); use as `is_leaf`-style predicate or
    pass `nnx.LoRAParam` itself as an nnx filter."""
    return isinstance(leaf, nnx.LoRAParam)


def split_adapters(params: nnx.State) -> tuple[nnx.State, nnx.State]:
    """params -> (adapters: the nnx.LoRAParam leaves, base: every other nnx.Param), the same arrays."""
    adapters, base = nnx.split_state(params, nnx.LoRAParam, ...)
    return adapters, base


def merge_params(adapters: nnx.State, base: nnx.State) -> nnx.State:
    """The inverse of `split_adapters`: one params state for `nnx.merge` with the LoRA graphdef."""
    return nnx.merge_state(adapters, base)


def _with_adapter_values(params: nnx.State, value_of) -> nnx.State:
    """params with each adapter leaf's array replaced by value_of(name, array), name the leaf's last key."""

    def one(path, leaf):
        if not is_adapter(leaf):
            return leaf
        return leaf.replace(value_of(str(path[-1].key), leaf[...]))

    return jax.tree_util.tree_map_with_path(one, params, is_leaf=is_variable)


def adapters_off(params: nnx.State) -> nnx.State:
    """params with every adapter B set to zero (A kept): the LoRA model then computes the base
    model's function exactly (x @ A @ 0 = 0). The base arrays are the same objects, not copies."""
    return _with_adapter_values(params, lambda name, array: jnp.zeros_like(array) if name == _LORA_B else array)


def merge_into_base(graphdef: nnx.GraphDef, params: nnx.State) -> tuple[nnx.GraphDef, nnx.State]:
    """Fold the adapters into the kernels: W' = W + (alpha / rank) * A @ B (float32, HIGHEST
    precision) for every adapted projection; returns (base_graphdef, base_params) of the plain
    transformer (no adapters, no Qwix interception: the graphdef `init_params` gives for the same
    config), ready for export. The parameters that carry no adapter are the same arrays as in
    `params`."""
    lora_model = nnx.merge(graphdef, params)
    scale, cfg = lora_model.lora_settings.scale, lora_model.cfg
    flat = dict(nnx.to_flat_state(params))
    merged = {}
    for path, variable in flat.items():
        if is_adapter(variable):
            continue
        if path[-1] == "kernel" and path[:-1] + (_LORA_A,) in flat:
            lora_a, lora_b = flat[path[:-1] + (_LORA_A,)][...], flat[path[:-1] + (_LORA_B,)][...]
            variable = variable.replace(
                variable[...] + scale * jnp.matmul(lora_a, lora_b, precision=jax.lax.Precision.HIGHEST)
            )
        merged[path] = variable
    base_graphdef, _ = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, nnx.Rngs(params=0))), nnx.Param)
    return base_graphdef, nnx.from_flat_state(merged)
