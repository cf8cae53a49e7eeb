"""The train and rollout meshes a config asks for (`mesh.*`).

The train mesh has the axes data x fsdp x tensor (`rules.MESH_AXES`) over `mesh.train_devices`, or
over the first data x fsdp x tensor devices not in `mesh.rollout_devices`; one size may be -1, the
rest of the devices. The rollout mesh (asynchronous GRPO with `mesh.rollout_devices`) has the same
axes, tensor = `mesh.rollout_tensor` and data = the rest. All sizes 1 and no device lists = no mesh:
the default device, today's single-device program.

Meshes use `AxisType.Auto` axes: the model's sharding constraints guide XLA's partitioner and every
ordinary matmul is allowed (JAX 0.10's default Explicit axes would demand `out_sharding` on each).
"""

from __future__ import annotations

import contextlib
import math

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from trainers.parallel.rules import MESH_AXES
from trainers.parallel.sizes import MeshError, resolve_axis_sizes

__all__ = ["MeshError", "describe", "make_mesh", "mesh_context", "meshes_for", "resolve_axis_sizes"]


def make_mesh(devices: list, sizes: dict[str, int]) -> Mesh:
    """A mesh with the axes MESH_AXES (sizes from `sizes`, 1 when absent) over `devices`, Auto axes."""
    shape = tuple(sizes.get(axis, 1) for axis in MESH_AXES)
    return Mesh(np.array(devices).reshape(shape), MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))


def _pick(indices: list[int], devices: list, field: str) -> list:
    missing = [i for i in indices if i >= len(devices)]
    if missing:
        raise MeshError(
            field,
            f"device index {missing[0]} is out of range: the run sees {len(devices)} device(s) "
            "(on a CPU host, XLA_FLAGS=--xla_force_host_platform_device_count=N gives N)",
        )
    return [devices[i] for i in indices]


def meshes_for(m, devices: list | None = None) -> tuple[Mesh | None, Mesh | None]:
    """(train mesh, rollout mesh) for the config's `mesh` section `m` over `devices` (default: all of
    `jax.devices()`, every process's). None = the default device (train) / the train mesh (rollout)."""
    sizes = {"data": m.data, "fsdp": m.fsdp, "tensor": m.tensor}
    if all(n == 1 for n in sizes.values()) and not m.train_devices and not m.rollout_devices:
        return None, None
    devices = list(jax.devices()) if devices is None else list(devices)
    rollout = _pick(m.rollout_devices, devices, "mesh.rollout_devices")
    if m.train_devices:
        train = _pick(m.train_devices, devices, "mesh.train_devices")
        sizes = resolve_axis_sizes(sizes, len(train), devices_field="mesh.train_devices")
    else:
        free = [d for d in devices if d not in rollout]
        if -1 in sizes.values():
            sizes = resolve_axis_sizes(sizes, len(free))
        wanted = math.prod(sizes.values())
        if wanted > len(free):
            raise MeshError(
                "mesh",
                f"data x fsdp x tensor = {wanted} devices but the run sees {len(free)} "
                f"free device(s){' (besides mesh.rollout_devices)' if rollout else ''}; lower the "
                "sizes, or start the run with more devices",
            )
        train = free[:wanted]
    rollout_mesh = None
    if rollout:
        if len(rollout) % m.rollout_tensor:
            raise MeshError(
                "mesh.rollout_tensor",
                f"{m.rollout_tensor} does not divide the {len(rollout)} devices of mesh.rollout_devices",
            )
        rollout_mesh = make_mesh(rollout, {"data": len(rollout) // m.rollout_tensor, "tensor": m.rollout_tensor})
    return make_mesh(train, sizes), rollout_mesh


def mesh_context(mesh: Mesh | None):
    """`jax.set_mesh(mesh)` (the mesh the model's activation constraints refer to while tracing);
    no context for None or a one-device mesh (e.g. `mesh.train_devices: [1]`), whose program is
    then exactly the single-device one. Thread-local."""
    return contextlib.nullcontext() if mesh is None or mesh.size == 1 else jax.set_mesh(mesh)


def describe(mesh: Mesh | None) -> str:
    """e.g. "data 2 x fsdp 4 x tensor 1 on devices [0..7]"; "the default device" for None."""
    if mesh is None:
        return "the default device"
    axes = " x ".join(f"{name} {size}" for name, size in zip(mesh.axis_names, mesh.devices.shape))
    return f"{axes} on devices {[d.id for d in mesh.devices.flat]}"
