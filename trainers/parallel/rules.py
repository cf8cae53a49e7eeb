"""Logical axes -> mesh axes: the one rules table, and the shardings it gives.

Every parameter of `trainers.models.transformer` carries the logical names of its dimensions
(`nnx.Param(..., out_sharding=("embed", "heads"))`), and the model constrains its activations with
logical names too (`constrain`). `RULES` maps each logical name to the mesh axes it is split over,
as MaxText and Tunix do; the meshes (`trainers.parallel.mesh`) always have the three axes
`MESH_AXES`, of size 1 where unused, so one table serves every mesh:

  - FSDP: parameters are split over `fsdp` along their hidden (`embed`) dimension; optimizer state
    follows its parameter; every batch is split over `data` x `fsdp`. XLA gathers a layer's weights
    where it is used and reduce-scatters its gradient.
  - Tensor parallelism: attention is split by heads (q/k/v column-wise, o row-wise), the MLP by its
    width (gate/up column-wise, down row-wise), the embedding and LM head by the vocabulary, so the
    chunked log-probs never gather whole logits.

A mesh axis that does not divide a dimension is left out for that dimension (the array is then
replicated along it): config validation refuses such sizes for heads, MLP width and vocabulary, so
this only happens for small terms (norm scales, a hidden size that fsdp does not divide).

With no mesh (one device, the default) every function here is the identity: the single-device
program is the one it always was.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")

Logical = tuple[str | None, ...]

RULES: dict[str, tuple[str, ...]] = {
    # parameters
    "vocab": ("tensor",),
    "embed": ("fsdp",),
    "heads": ("tensor",),  # q/o projections: heads x head_dim, split by whole heads
    "kv_heads": ("tensor",),  # k/v projections
    "mlp": ("tensor",),
    "norm": (),  # norm scales: small, replicated
    # activations
    "batch": ("data", "fsdp"),
    "act_heads": ("tensor",),
    "act_kv_heads": ("tensor",),
    "act_mlp": ("tensor",),
    "act_vocab": ("tensor",),
}
"""Logical axis -> the mesh axes it is split over (in order). A name not in the table (None,
"sequence", "hidden", "head_dim") is never split."""


def mesh_spec(logical: Logical, shape: tuple[int, ...], axis_sizes: dict[str, int]) -> PartitionSpec:
    """The PartitionSpec of an array of `shape` whose dimensions have the `logical` names, on a mesh
    with `axis_sizes`. Mesh axes of size 1, mesh axes already used by an earlier dimension, and
    mesh axes whose product does not divide the dimension are left out."""
    used: set[str] = set()
    spec: list[Any] = []
    for name, size in zip(logical, shape):
        axes = []
        product = 1
        for axis in RULES.get(name, ()) if name is not None else ():
            n = axis_sizes.get(axis, 1)
            if n == 1 or axis in used or size % (product * n):
                continue
            axes.append(axis)
            product *= n
        used.update(axes)
        spec.append(None if not axes else axes[0] if len(axes) == 1 else tuple(axes))
    while spec and spec[-1] is None:
        spec.pop()
    return PartitionSpec(*spec)


def _axis_sizes(mesh: Any) -> dict[str, int]:
    return dict(zip(mesh.axis_names, mesh.axis_sizes))


def logical_axes(variable: nnx.Variable) -> Logical:
    """A parameter's logical axis names (its `out_sharding` metadata); () when it has none."""
    names = variable.get_metadata().get("out_sharding") if hasattr(variable, "get_metadata") else None
    return tuple(names) if names else ()


def is_variable(x: Any) -> bool:
    """A parameter's nnx.Variable (the leaf that carries its logical axes), for `is_leaf=`."""
    return isinstance(x, nnx.Variable)


def state_shardings(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """For params, optimizer state or reference params (or their abstract shapes): a tree of the same
    structure whose leaves are NamedShardings on `mesh`. A parameter (and the optimizer state built
    from it, which keeps its `nnx.Param` wrappers) is split by its logical axes; anything else
    (step counters) is replicated."""
    sizes = _axis_sizes(mesh)

    def sharding(leaf: Any) -> Any:
        if is_variable(leaf):
            value = leaf.get_value() if hasattr(leaf, "get_value") else leaf.value
            return leaf.replace(NamedSharding(mesh, mesh_spec(logical_axes(leaf), tuple(value.shape), sizes)))
        return NamedSharding(mesh, PartitionSpec())

    return jax.tree.map(sharding, tree, is_leaf=is_variable)


def batch_sharding(mesh: jax.sharding.Mesh, shape: tuple[int, ...], batch_axis: int = 0) -> NamedSharding:
    """An array of `shape` split along `batch_axis` over data x fsdp (the "batch" rule; the other
    axes whole). Rows that data x fsdp does not divide are split over what does divide them (an
    evaluation's odd row count): correct, only less parallel."""
    logical = (None,) * batch_axis + ("batch",)
    return NamedSharding(mesh, mesh_spec(logical, tuple(shape), _axis_sizes(mesh)))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def constrain(x: jax.Array, logical: Logical) -> jax.Array:
    """Constrain an activation to the sharding its logical axes give on the current mesh
    (`jax.set_mesh`, which `Placement` sets around every traced call); without a mesh, x itself."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return x
    return jax.lax.with_sharding_constraint(x, mesh_spec(logical, x.shape, _axis_sizes(mesh)))


def active_axis_size(axis: str) -> int:
    """The size of mesh axis `axis` of the current mesh (1 without a mesh)."""
    mesh = jax.sharding.get_abstract_mesh()
    return 1 if mesh.empty else _axis_sizes(mesh).get(axis, 1)
